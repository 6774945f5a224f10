//go:build linux

package store

import (
	"fmt"
	"syscall"
)

// mapSegment maps the whole segment file shared and writable.
func mapSegment(s *segment) ([]byte, error) {
	b, err := syscall.Mmap(int(s.f.Fd()), 0, int(s.size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("store: map commitlog segment %d: %w", s.start, err)
	}
	return b, nil
}

// unmapSegment removes a mapping made by mapSegment.
func unmapSegment(b []byte) error { return syscall.Munmap(b) }

// releasePages drops b's pages from this process's page tables (MADV_DONTNEED): the data
// stays in the page cache (dirty pages stay dirty and are written back as usual), but no
// longer counts in the process's resident set. b must start on a page boundary.
func releasePages(b []byte) error { return syscall.Madvise(b, syscall.MADV_DONTNEED) }
