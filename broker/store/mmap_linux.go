//go:build linux

package store

import (
	"fmt"
	"os"
	"syscall"
)

// mapSegment maps the whole segment file shared and writable.
func mapSegment(s *segment) ([]byte, error) {
	b, err := mapFile(s.f, s.size)
	if err != nil {
		return nil, fmt.Errorf("store: map commitlog segment %d: %w", s.start, err)
	}
	return b, nil
}

// mapFile maps the first size bytes of f shared and writable. The mapping holds its own
// reference to the file: f may be closed while it lives.
func mapFile(f *os.File, size int64) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

// unmapSegment removes a mapping made by mapSegment or mapFile.
func unmapSegment(b []byte) error { return syscall.Munmap(b) }

// releasePages drops b's pages from this process's page tables (MADV_DONTNEED): the data
// stays in the page cache (dirty pages stay dirty and are written back as usual), but no
// longer counts in the process's resident set. b must start on a page boundary.
func releasePages(b []byte) error { return syscall.Madvise(b, syscall.MADV_DONTNEED) }

// populateSupported: MADV_POPULATE_WRITE exists (Linux 5.14); an older kernel answers EINVAL.
const populateSupported = true

// populateWrite faults b's pages in writable (MADV_POPULATE_WRITE, 23).
func populateWrite(b []byte) error { return syscall.Madvise(b, 23) }
