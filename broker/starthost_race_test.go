package broker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestSendDuringStartHasStoreHost: a broker restarted on its fixed port (as in
// production, where producers reconnect at once) may get a send before Start has
// returned. The message must be stored with the broker's address as store host (it is
// part of the offset message id), and reading b.storeHost must not race with Start
// writing it (run with -race).
func TestSendDuringStartHasStoreHost(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	mod := func(c *Config) { c.ListenAddr = addr }
	b := startBroker(t, dir, mod)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Early", 1)
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	frame, err := remoting.NewRequest(remoting.SendMessageV2, map[string]string{
		"a": "pg", "b": "Early", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000000", "h": "0", "i": "KEYS\x01early\x02",
	}, []byte("early")).Encode()
	if err != nil {
		t.Fatal(err)
	}
	var b2 *Broker
	for round := 0; round < 8; round++ {
		if b2 != nil {
			if err := b2.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		// Producers that keep reconnecting: dial until the port answers, send at once.
		var wg sync.WaitGroup
		answers := make(chan string, 4)
		stop := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				deadline := time.Now().Add(20 * time.Second)
				for time.Now().Before(deadline) {
					select {
					case <-stop:
						return
					default:
					}
					nc, err := net.Dial("tcp", addr)
					if err != nil {
						continue
					}
					_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
					_, _ = nc.Write(frame)
					f, err := remoting.ReadFrame(nc, 0)
					_ = nc.Close()
					if err != nil {
						answers <- "read: " + err.Error()
						return
					}
					resp, _, err := remoting.DecodeFrame(f)
					if err != nil {
						answers <- "decode: " + err.Error()
						return
					}
					answers <- fmt.Sprintf("%d %s %s", resp.Code, resp.Remark, resp.ExtFields["msgId"])
					return
				}
				answers <- "port never answered"
			}()
		}
		b2 = startBroker(t, dir, mod)
		for range 4 {
			select {
			case a := <-answers:
				if !strings.HasPrefix(a, "0 ") {
					t.Errorf("early send: %s", a)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no answer")
			}
		}
		close(stop)
		wg.Wait()
	}

	resp := pull(t, c, b2.Addr(), "g", "Early", 0, 0, "*", 0)
	msgs, err := message.DecodeRecords(resp.Body, message.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) == 0 {
		t.Fatal("no message stored")
	}
	for _, m := range msgs {
		if got := m.StoreHost.String(); got != b2.Addr() {
			t.Errorf("message at offset %d stored with store host %q, want %q (offset msg id %s)", m.QueueOffset, got, b2.Addr(), m.OffsetMsgID)
		}
	}
}
