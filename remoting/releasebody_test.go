package remoting

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestReleaseBodyReusesFrame: the buffer of a request whose handler released its body
// goes back to the frame pool (a later frame of its size class gets it), and one whose
// handler did not is left alone.
func TestReleaseBodyReusesFrame(t *testing.T) {
	reused := 0
	for range 100 {
		frame := frameBuf(2000, false)[:2000]
		req := &RemotingCommand{frame: frame, Body: frame[100:]}
		req.ReleaseBody()
		reuseFrame(req)
		if req.Body != nil || req.frame != nil {
			t.Fatal("a released request still points at its recycled frame")
		}
		if &frameBuf(2000, false)[:1][0] == &frame[0] {
			reused++
		}
	}
	if reused == 0 {
		t.Fatal("no released frame was handed out again in 100 tries")
	}
	kept := frameBuf(3000, false)[:3000]
	req := &RemotingCommand{frame: kept, Body: kept[10:]}
	reuseFrame(req)
	if req.frame == nil || len(req.Body) != 2990 {
		t.Fatal("a request whose body was not released lost its frame")
	}
}

// TestReleaseBodyUnderLoad: an inline handler that answers with the request's own body
// and then releases it: every answer carries exactly its request's body, although the
// frames are reused for the requests that follow (the answer is encoded before reuse).
func TestReleaseBodyUnderLoad(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.HandleInline(RequestCode(501), func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		resp := NewResponse(Success, "")
		resp.Body = req.Body
		req.ReleaseBody()
		return resp
	})
	c := newClient(t, ClientConfig{})
	const n = 2000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		body := bytes.Repeat([]byte(fmt.Sprintf("%06d", i)), 100+(i%7)*1500) // 600 B .. 54 KiB
		wg.Add(1)
		if err := c.InvokeAsync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(501, nil, body), func(resp *RemotingCommand, err error) {
			defer wg.Done()
			if err == nil && !bytes.Equal(resp.Body, body) {
				err = fmt.Errorf("request %d: answer body of %d bytes is not the request's (%d bytes)", i, len(resp.Body), len(body))
			}
			if err != nil {
				errs <- err
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
