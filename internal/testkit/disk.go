package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// MountTmpfs mounts a tmpfs of the given size (mount(8)'s size option, e.g. "48m") on a
// fresh temporary directory and unmounts it when the test ends; it skips the test when
// that is not possible (not root, no mount(8), a container without the capability).
// Tests use it to simulate a full disk without filling the machine's.
func MountTmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount(2) of a small tmpfs, filled to simulate a full disk); run as root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// FillDisk writes a file named "filler" in dir until its file system is full (at most
// 4 GiB, then the test fails).
func FillDisk(t testing.TB, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for range 1 << 16 {
		if _, err := f.Write(buf); err != nil {
			return
		}
	}
	t.Fatal("the file system did not fill up")
}
