//go:build linux

package remoting

import (
	"net"
	"syscall"
	"unsafe"
)

// rawWriter makes non-blocking write attempts on a TCP connection's socket for the
// direct writes of a Conn (see Conn.writeDirect). Guarded by the Conn's wmu.
type rawWriter struct {
	rc   syscall.RawConn
	bufs [][]byte
	iov  []syscall.Iovec
	n    int
	err  error
	try  func(fd uintptr) bool // one write attempt, bound once (no closure per write)
}

// newRawWriter returns a writer for nc's socket, or nil when nc offers none (TLS).
func newRawWriter(nc net.Conn) *rawWriter {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &rawWriter{rc: rc}
	w.try = w.attempt
	return w
}

// attempt is one write(2) or writev(2) of w.bufs, never waiting for the socket to become
// writable: it always reports done to RawConn.Write.
func (w *rawWriter) attempt(fd uintptr) bool {
	for {
		var n uintptr
		var errno syscall.Errno
		if len(w.bufs) == 1 {
			b := w.bufs[0]
			n, _, errno = syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		} else {
			w.iov = w.iov[:0]
			for _, b := range w.bufs {
				if len(b) == 0 {
					continue
				}
				v := syscall.Iovec{Base: unsafe.SliceData(b)}
				v.SetLen(len(b))
				w.iov = append(w.iov, v)
			}
			n, _, errno = syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(unsafe.SliceData(w.iov))), uintptr(len(w.iov)))
			clear(w.iov) // keep no frame alive
		}
		switch errno {
		case 0:
			w.n, w.err = int(n), nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			w.n, w.err = 0, nil
		default:
			w.n, w.err = 0, errno
		}
		return true
	}
}

// write makes one non-blocking attempt to write bufs (at most 1024 of them, the
// writev limit) and returns how many bytes the kernel took; a full socket buffer is
// not an error (n < total).
func (w *rawWriter) write(bufs [][]byte) (int, error) {
	w.bufs = bufs
	err := w.rc.Write(w.try)
	w.bufs = nil
	if err != nil {
		return 0, err
	}
	return w.n, w.err
}
