package store

import (
	"container/list"
	"fmt"
	"os"
	"sync"
)

// DefaultMaxOpenFiles is Config.MaxOpenFiles' default: at most 1000 idle consume-queue
// and key-index files are open at once, whatever the number of queues.
const DefaultMaxOpenFiles = 1000

// errFileGone is returned by lazyFile.acquire once the file was deleted (retention,
// DeleteTopic, truncate) or the store closed it. It matches os.ErrClosed, which is what a
// reader of a deleted file saw when files stayed open.
var errFileGone = fmt.Errorf("store: file deleted: %w", os.ErrClosed)

// lazyFile is a store file (a consume-queue or index file) whose descriptor the fdCache
// opens on demand and closes when idle. Use it through acquire/release or with, or its
// *os.File-like methods, which return an error matching os.ErrClosed after Close.
type lazyFile struct {
	path  string
	cache *fdCache

	// Guarded by cache.mu.
	fd   *os.File      // nil while closed
	elem *list.Element // in cache.lru while fd != nil
	pins int           // callers using fd
	gone bool          // deleted or closed: acquire fails
}

func newLazyFile(path string, cache *fdCache) *lazyFile { return &lazyFile{path: path, cache: cache} }

// ReadAt reads from the file (see os.File.ReadAt).
func (f *lazyFile) ReadAt(b []byte, off int64) (n int, err error) {
	err = f.with(func(fd *os.File) error { n, err = fd.ReadAt(b, off); return err })
	return n, err
}

// WriteAt writes to the file (see os.File.WriteAt).
func (f *lazyFile) WriteAt(b []byte, off int64) (n int, err error) {
	err = f.with(func(fd *os.File) error { n, err = fd.WriteAt(b, off); return err })
	return n, err
}

// Sync fsyncs the file (reopening it if it was closed while idle: fsync covers the
// file's dirty pages whichever descriptor wrote them).
func (f *lazyFile) Sync() error { return f.with((*os.File).Sync) }

// Truncate changes the file's size.
func (f *lazyFile) Truncate(size int64) error {
	return f.with(func(fd *os.File) error { return fd.Truncate(size) })
}

// Close marks the file gone (it is about to be deleted, or the store closes) and closes
// its descriptor once no caller uses it.
func (f *lazyFile) Close() error { f.drop(); return nil }

// fdCache bounds the open consume-queue files: files are opened on first use and kept in
// an LRU list; when more than max are open, the least recently used ones that no caller
// is using (pins == 0) are closed. A file in use is never closed under its user, so the
// cap can be exceeded while more than max files are in use at once.
//
// Closing a written file loses nothing: the written bytes are in the page cache of the
// file itself, and the consume-queue flush reopens the file to fsync it (fsync covers
// every dirty page of the file, whichever descriptor wrote it).
//
// Lock order: fdCache.mu is a leaf; it is taken under Store.putMu and consume-queue
// operations but never takes another lock.
type fdCache struct {
	max int

	mu   sync.Mutex
	lru  list.List // of *lazyFile with fd != nil; front = most recently used
	open int       // files with fd != nil
}

func newFDCache(max int) *fdCache { return &fdCache{max: max} }

// openFiles returns how many consume-queue files are open now.
func (c *fdCache) openFiles() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// acquire returns the file's descriptor, opening it if needed, and pins it until release.
// It returns errFileGone (wrapped) after the file was dropped or removed.
func (f *lazyFile) acquire() (*os.File, error) {
	c := f.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.gone {
		return nil, errFileGone
	}
	if f.fd == nil {
		fd, err := os.OpenFile(f.path, os.O_RDWR, 0)
		if err != nil {
			if os.IsNotExist(err) {
				return nil, fmt.Errorf("%w: %s", errFileGone, f.path)
			}
			return nil, fmt.Errorf("store: open %s: %w", f.path, err)
		}
		f.fd = fd
		f.elem = c.lru.PushFront(f)
		c.open++
	} else {
		c.lru.MoveToFront(f.elem)
	}
	f.pins++
	c.evictLocked()
	return f.fd, nil
}

// release unpins the file taken with acquire.
func (f *lazyFile) release() {
	c := f.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	f.pins--
	if f.pins == 0 && f.gone {
		c.closeLocked(f)
		return
	}
	c.evictLocked()
}

// adopt puts a just created file's open descriptor in the cache (unpinned).
func (f *lazyFile) adopt(fd *os.File) {
	c := f.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	f.fd = fd
	f.elem = c.lru.PushFront(f)
	c.open++
	c.evictLocked()
}

// drop marks the file deleted: no later acquire succeeds, and its descriptor is closed
// now or, when in use, by the last release.
func (f *lazyFile) drop() {
	c := f.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	f.gone = true
	if f.pins == 0 {
		c.closeLocked(f)
	}
}

// with runs op on the file's descriptor, pinned.
func (f *lazyFile) with(op func(*os.File) error) error {
	fd, err := f.acquire()
	if err != nil {
		return err
	}
	defer f.release()
	return op(fd)
}

func (c *fdCache) closeLocked(f *lazyFile) {
	if f.fd == nil {
		return
	}
	c.lru.Remove(f.elem)
	f.elem = nil
	f.fd.Close()
	f.fd = nil
	c.open--
}

// evictLocked closes least recently used unpinned files while more than max are open.
func (c *fdCache) evictLocked() {
	for e := c.lru.Back(); e != nil && c.open > c.max; {
		f := e.Value.(*lazyFile)
		e = e.Prev()
		if f.pins == 0 {
			c.closeLocked(f)
		}
	}
}
