//go:build !unix

package store

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDir opens <dir>/lock; without flock(2) it cannot keep a second process out.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: open lock file: %w", err)
	}
	return f, nil
}

func unlockDir(f *os.File) {
	if f != nil {
		f.Close()
	}
}
