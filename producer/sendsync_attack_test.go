package producer

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestSyncFlushMixedSends: a SYNC_FLUSH broker, one producer, 128 goroutines
// mixing SendSync, SendAsync and SendOneway with bodies of varied sizes; every stored
// message is pulled back and its body checked against its sequence number.
func TestSyncFlushMixedSends(t *testing.T) {
	for _, ft := range []string{"SYNC_FLUSH", "ASYNC_FLUSH"} {
		t.Run(ft, func(t *testing.T) { mixedSends(t, ft) })
	}
}

func mixedSends(t *testing.T, flush string) {
	b, _ := testbroker.Start(t, broker.Config{FlushDiskType: flush})
	const topic, queues = "MixedSends", 4
	createTopic(t, testbroker.Namesrv(b), topic, queues)
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), SendTimeout: 20 * time.Second})
	const goroutines, per = 128, 12
	// One bound for the whole send phase, not one of 30 s per send: preparing a send is
	// CPU work (a 1 MiB body of random bytes is zlib-compressed before it is found
	// incompressible), and with 128 goroutines under -race on two loaded cores it took
	// 15 to 31 s per 1 MiB body, so the async and one-way sends of those bodies failed
	// before reaching the network. Each network attempt stays bounded by SendTimeout.
	sendCtx := testkit.Context(t, 3*time.Minute)
	var wg sync.WaitGroup
	var syncOK, asyncOK, oneway atomic.Int64
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var awg sync.WaitGroup
			defer awg.Wait()
			for i := 0; i < per; i++ {
				seq := g*per + i
				size := 10 + (seq*131)%5000
				if seq%97 == 5 {
					size = 1 << 20
				}
				m := message.NewMessage(topic, testkit.SeqBody(seq, size, 7))
				m.SetKeys("k" + strconv.Itoa(seq))
				ctx := sendCtx
				switch i % 3 {
				case 0:
					if _, err := p.SendSync(ctx, m); err != nil {
						t.Errorf("sync %d: %v", seq, err)
					} else {
						syncOK.Add(1)
					}
				case 1:
					awg.Add(1)
					if err := p.SendAsync(ctx, m, func(r *message.SendResult, err error) {
						defer awg.Done()
						if err != nil {
							t.Errorf("async %d: %v", seq, err)
						} else {
							asyncOK.Add(1)
						}
					}); err != nil {
						awg.Done()
						t.Errorf("async %d: %v", seq, err)
					}
				case 2:
					if err := p.SendOneway(ctx, m); err != nil {
						t.Errorf("oneway %d: %v", seq, err)
					} else {
						oneway.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	want := syncOK.Load() + asyncOK.Load() + oneway.Load()
	addr := b.Addr()
	testkit.WaitFor(t, 20*time.Second, func() bool { return sum(maxOffsets(t, addr, topic, queues)) >= want }, "all sends stored")
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	seen := map[int]bool{}
	for q := 0; q < queues; q++ {
		off := int64(0)
		for k := 0; k < 10000; k++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			msgs, next, err := pull(ctx, rc, addr, "mixedg", topic, q, off)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				seq := int(uint64(m.Body[0])<<56 | uint64(m.Body[1])<<48 | uint64(m.Body[2])<<40 | uint64(m.Body[3])<<32 | uint64(m.Body[4])<<24 | uint64(m.Body[5])<<16 | uint64(m.Body[6])<<8 | uint64(m.Body[7]))
				if testkit.Sum(m.Body) != testkit.Sum(testkit.SeqBody(seq, len(m.Body), 7)) || m.Property(message.PropertyKeys) != "k"+strconv.Itoa(seq) {
					t.Errorf("message %d corrupt (keys %q, %d bytes)", seq, m.Property(message.PropertyKeys), len(m.Body))
				}
				if seen[seq] {
					t.Errorf("message %d stored twice", seq)
				}
				seen[seq] = true
			}
			if next == off {
				break
			}
			off = next
		}
	}
	if int64(len(seen)) != want {
		t.Fatalf("stored %d distinct messages, sent %d", len(seen), want)
	}
	t.Logf("sync %d async %d oneway %d, all %d pulled back intact", syncOK.Load(), asyncOK.Load(), oneway.Load(), len(seen))
}

// TestSendSyncHugeSendTimeout: SendTimeout = math.MaxInt64 (accepted by Validate,
// i.e. "no practical per-attempt limit") must not make every SendSync time out.
func TestSendSyncHugeSendTimeout(t *testing.T) {
	slow := func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		<-time.After(50 * time.Millisecond) // a broker answering in 50 ms (several sweeps)
		return storeOK(remoting.Success)(req)
	}
	b := fakeremote.Start(t, brokerHandlers(slow))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, SendTimeout: time.Duration(math.MaxInt64), RetryTimesWhenSendFailed: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.SendSync(ctx, message.NewMessage("T", []byte("x"))); err != nil {
		t.Fatalf("SendSync with SendTimeout %v: %v", time.Duration(math.MaxInt64), err)
	}
}

// TestBrokerShutdownUnderSyncLoad: the broker shuts down while 64 goroutines send
// synchronously (answers held by its readers): Shutdown returns without error, every
// SendSync ends (stored or an error, no hang past its timeout), no goroutine is left
// (goleak in TestMain).
func TestBrokerShutdownUnderSyncLoad(t *testing.T) {
	for _, flush := range []string{"ASYNC_FLUSH", "SYNC_FLUSH"} {
		t.Run(flush, func(t *testing.T) {
			b, stop := testbroker.Start(t, broker.Config{FlushDiskType: flush})
			createTopic(t, testbroker.Namesrv(b), "StopUnderLoad", 4)
			p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), SendTimeout: 3 * time.Second, RetryTimesWhenSendFailed: -1})
			var wg sync.WaitGroup
			var stored, failed atomic.Int64
			var slow atomic.Int64
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 500; i++ {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						start := time.Now()
						_, err := p.SendSync(ctx, message.NewMessage("StopUnderLoad", testkit.SeqBody(g*1000+i, 200, 1)))
						cancel()
						if time.Since(start) > 8*time.Second {
							slow.Add(1)
						}
						if err != nil {
							failed.Add(1)
							return
						}
						stored.Add(1)
					}
				}()
			}
			testkit.WaitFor(t, 20*time.Second, func() bool { return stored.Load() > 300 }, "some sends stored")
			stop()
			wg.Wait()
			t.Logf("stored %d, failed goroutines %d, calls over 8s %d", stored.Load(), failed.Load(), slow.Load())
			if slow.Load() > 0 {
				t.Errorf("%d calls took longer than 8 s", slow.Load())
			}
		})
	}
}
