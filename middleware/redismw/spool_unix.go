//go:build unix

package redismw

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock on f: one Parker per spool file, across
// processes (and across Parkers in one process: flock locks belong to the open file).
func lockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }

func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
