package peers

import "syscall"

// setDeathSignal has the kernel SIGKILL the child when the thread that started it exits
// (Go keeps its threads for the life of the process unless a goroutine locked to one
// exits), so a peer does not outlive a test binary that is killed.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
