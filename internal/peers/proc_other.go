//go:build !unix

package peers

import "os/exec"

// setProcAttr does nothing on systems without process groups.
func setProcAttr(*exec.Cmd) {}

// signalGroup kills the child process (its own children are not reached here).
func signalGroup(cmd *exec.Cmd, _ bool) { _ = cmd.Process.Kill() }
