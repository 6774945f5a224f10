package redismw

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// ErrSpoolClosed is returned (inside a *middleware.ParkFailedError) by a park that needs the spool
// after Parker.Close.
var ErrSpoolClosed = errors.New("middleware: park spool closed")

// spool is the local append-only file of records that could not reach Redis. One JSON
// record per line; every append is fsynced before it returns.
//
// Files: path (appends), path+".draining" (being drained), path+".bad" (lines that did
// not decode), path+".lock" (held with flock on unix while the spool is open).
type spool struct {
	path     string
	draining string
	bad      string
	lock     *os.File

	mu     sync.Mutex // guards f, closed and the rename of path
	f      *os.File   // append handle of path; nil until needed
	closed bool
}

func openSpool(path string) (*spool, error) {
	lf, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("middleware: ParkConfig.SpoolPath %q: %w", path, err)
	}
	if err := lockFile(lf); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("middleware: ParkConfig.SpoolPath %q is in use by another Parker: %w", path, err)
	}
	return &spool{path: path, draining: path + ".draining", bad: path + ".bad", lock: lf}, nil
}

// append writes data and a newline to the spool and fsyncs it.
func (s *spool) append(data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrSpoolClosed
	}
	if s.f == nil {
		f, err := openAppend(s.path)
		if err != nil {
			return err
		}
		s.f = f
	}
	line := make([]byte, 0, len(data)+1)
	line = append(append(line, data...), '\n')
	if _, err := s.f.Write(line); err != nil {
		s.dropHandle()
		return fmt.Errorf("middleware: park spool write: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		s.dropHandle()
		return fmt.Errorf("middleware: park spool fsync: %w", err)
	}
	return nil
}

// dropHandle closes the append handle after a failed write; the next append reopens the
// file and first ends a torn line, so the next record starts on a line of its own.
func (s *spool) dropHandle() {
	_ = s.f.Close()
	s.f = nil
}

// openAppend opens path for appending (creating it and syncing its directory when new)
// and makes sure it ends with a newline.
func openAppend(path string) (*os.File, error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("middleware: park spool open: %w", err)
	}
	if os.IsNotExist(statErr) {
		if err := syncDir(filepath.Dir(path)); err != nil {
			_ = f.Close()
			return nil, err
		}
		return f, nil
	}
	if torn, err := endsTorn(path); err != nil {
		_ = f.Close()
		return nil, err
	} else if torn {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("middleware: park spool write: %w", err)
		}
	}
	return f, nil
}

// endsTorn reports whether the non-empty file at path does not end with a newline.
func endsTorn(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("middleware: park spool: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return false, err
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], st.Size()-1); err != nil {
		return false, fmt.Errorf("middleware: park spool: %w", err)
	}
	return b[0] != '\n', nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("middleware: park spool dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("middleware: park spool dir fsync: %w", err)
	}
	return nil
}

// pending reports whether the spool file has data or a draining file exists.
func (s *spool) pending() bool {
	if _, err := os.Stat(s.draining); err == nil {
		return true
	}
	st, err := os.Stat(s.path)
	return err == nil && st.Size() > 0
}

// takeDraining returns the file to drain: the draining file left by an interrupted drain,
// or else the spool file renamed to the draining file (new appends go to a fresh spool
// file). It returns nil when there is nothing to drain.
func (s *spool) takeDraining() (*os.File, error) {
	if f, err := os.Open(s.draining); err == nil {
		return f, nil
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("middleware: park spool: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSpoolClosed
	}
	st, err := os.Stat(s.path)
	if os.IsNotExist(err) || (err == nil && st.Size() == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("middleware: park spool: %w", err)
	}
	if s.f != nil {
		if err := s.f.Close(); err != nil {
			return nil, fmt.Errorf("middleware: park spool close: %w", err)
		}
		s.f = nil
	}
	if err := os.Rename(s.path, s.draining); err != nil {
		return nil, fmt.Errorf("middleware: park spool rotate: %w", err)
	}
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		return nil, err
	}
	f, err := os.Open(s.draining)
	if err != nil {
		return nil, fmt.Errorf("middleware: park spool: %w", err)
	}
	return f, nil
}

// pushFunc pushes one record line (idempotent by id); it reports whether the record was
// new in Redis.
type pushFunc func(ctx context.Context, id string, line []byte) (bool, error)

// drainFile pushes every record of the draining file f (and closes f). Lines that do not
// decode go to the bad file. When every line is handled the draining file is removed.
func (s *spool) drainFile(ctx context.Context, f *os.File, st *DrainStats, push pushFunc, log *slog.Logger) error {
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for lines := 0; ; lines++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, rerr := r.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return fmt.Errorf("middleware: park spool read: %w", rerr)
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		if len(line) > 0 {
			var rec ParkedRecord
			if err := json.Unmarshal(line, &rec); err != nil || rec.ID == "" || rec.Topic == "" {
				if err := s.appendBad(line); err != nil {
					return err
				}
				st.Bad++
				log.Warn("park: undecodable spool line moved to the bad file", "file", s.bad, "line", lines+1, "bytes", len(line))
			} else {
				pushed, err := push(ctx, rec.ID, line)
				if err != nil {
					return fmt.Errorf("middleware: park spool drain of record %s: %w", rec.ID, err)
				}
				if pushed {
					st.Moved++
				} else {
					st.Skipped++
				}
			}
		}
		if rerr != nil { // io.EOF after the last line
			break
		}
	}
	if err := os.Remove(s.draining); err != nil {
		return fmt.Errorf("middleware: park spool: %w", err)
	}
	return syncDir(filepath.Dir(s.draining))
}

func (s *spool) appendBad(line []byte) error {
	f, err := os.OpenFile(s.bad, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("middleware: park spool bad file: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(append(append([]byte(nil), line...), '\n')); err != nil {
		return fmt.Errorf("middleware: park spool bad file: %w", err)
	}
	return f.Sync()
}

// close closes the append handle and releases the lock; later appends fail.
func (s *spool) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.f != nil {
		err = s.f.Close()
		s.f = nil
	}
	return errors.Join(err, unlockFile(s.lock), s.lock.Close())
}
