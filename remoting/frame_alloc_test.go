package remoting

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
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

// TestRecycledFramesKeepTheirBytes: the writer recycles the frames it wrote for the next
// Encode; many concurrent calls of mixed sizes (both size classes) must still each get
// their own body and header back.
func TestRecycledFramesKeepTheirBytes(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		k, _ := req.Ext("k")
		r := NewResponse(Success, "")
		r.ExtList = []ExtField{{"k", k}}
		r.Body = req.Body
		return r
	})
	c := newClient(t, ClientConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				key := strconv.Itoa(g*1000 + i)
				body := bytes.Repeat([]byte(key+","), 1+(i*37)%600) // 2 B .. 4 KB
				req := NewRequest(SendMessage, nil, body)
				req.ExtList = []ExtField{{"k", key}}
				resp, err := c.InvokeSync(ctx, s.Addr(), req)
				if err != nil {
					errs <- err
					return
				}
				if k, _ := resp.Ext("k"); k != key || !bytes.Equal(resp.Body, body) {
					errs <- fmt.Errorf("call %s: answer k=%q with %d body bytes, want %d", key, k, len(resp.Body), len(body))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
