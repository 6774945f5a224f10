package remoting

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

// TestReadFrameAllocatesWithData: a peer that announces a 16 MiB frame and sends 10
// bytes made ReadFrame allocate 1 MiB at once; 1,000 such connections (the default
// per-address limit) took a broker from 50 MB to 1.09 GB of RSS. The buffer must now
// grow with the bytes that actually arrive.
func TestReadFrameAllocatesWithData(t *testing.T) {
	for _, announced := range []int{1 << 20, 16<<20 - 8} {
		in := make([]byte, 4+10)
		binary.BigEndian.PutUint32(in, uint32(announced))
		// The least of several rounds: other goroutines of the test binary only add.
		least := uint64(1 << 62)
		for range 5 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ReadFrame(bytes.NewReader(in), 0)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("half-sent frame: %v", err)
			}
			least = min(least, after.TotalAlloc-before.TotalAlloc)
		}
		if least > 128<<10 {
			t.Errorf("a frame announcing %d bytes with 10 sent allocates %d bytes", announced, least)
		}
	}
	// Frames of every size still arrive whole.
	for _, n := range []int{4, 100, 64 << 10, 64<<10 + 1, 1 << 20, 3<<20 + 17} {
		body := bytes.Repeat([]byte{7}, n)
		binary.BigEndian.PutUint32(body, 0) // header length 0
		in := binary.BigEndian.AppendUint32(nil, uint32(n))
		in = append(in, body...)
		f, err := ReadFrame(bytes.NewReader(in), 0)
		if err != nil || !bytes.Equal(f, body) {
			t.Fatalf("frame of %d bytes: %v, got %d bytes", n, err, len(f))
		}
		if _, err := ReadFrame(bytes.NewReader(in[:len(in)-1]), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("frame of %d bytes cut short by one: %v", n, err)
		}
	}
}
