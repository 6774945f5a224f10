package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// attackRecordBody is the body of the message at queue q, offset off of topic: a header
// naming them, then deterministic filler of a size that depends on both.
func attackRecordBody(topic string, q int, off int64) []byte {
	head := fmt.Sprintf("%s/%d/%d/", topic, q, off)
	size := len(head) + int((uint64(off)*2654435761+uint64(q)*40503)%18000)
	b := append(make([]byte, 0, size), head...)
	r := rand.New(rand.NewPCG(uint64(off), uint64(q)+uint64(len(topic))))
	for len(b) < size {
		b = binary.LittleEndian.AppendUint64(b, r.Uint64())
	}
	return b[:size]
}

func attackSend(ctx context.Context, c *remoting.Client, addr, topic string, q int, body []byte, tag string) (*remoting.RemotingCommand, error) {
	props := map[string]string{message.PropertyTags: tag, "q": strconv.Itoa(q)}
	ext := map[string]string{
		"producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": strconv.Itoa(q), "sysFlag": "0", "bornTimestamp": strconv.FormatInt(time.Now().UnixMilli(), 10),
		"flag": "0", "properties": message.MarshalProperties(props), "reconsumeTimes": "0", "unitMode": "false",
		"maxReconsumeTimes": "0", "batch": "false",
	}
	return c.InvokeSync(ctx, addr, remoting.NewRequest(remoting.SendMessage, ext, body))
}

func attackPull(ctx context.Context, c *remoting.Client, addr, topic string, q int, off int64, sub string, suspendMs int) (*remoting.RemotingCommand, error) {
	sysFlag := wire.PullFlagSubscription
	if suspendMs > 0 {
		sysFlag |= wire.PullFlagSuspend
	}
	ext := map[string]string{
		"consumerGroup": "gAtk", "topic": topic, "queueId": strconv.Itoa(q), "queueOffset": strconv.FormatInt(off, 10),
		"maxMsgNums": "32", "sysFlag": strconv.Itoa(sysFlag), "commitOffset": "0", "suspendTimeoutMillis": strconv.Itoa(suspendMs),
		"subscription": sub, "subVersion": "0", "expressionType": "TAG",
	}
	return c.InvokeSync(ctx, addr, remoting.NewRequest(remoting.PullMessage, ext, nil))
}

// TestPullAttackRetentionAndDelete: with 128 KiB commitlog segments, pullers on three
// connections read random offsets (some with tag filters that skip most records, some
// held) of four queues while a sender appends, retention deletes the oldest segments
// under them, and a second topic with held pulls on it is deleted. Every record a pull
// returns must be the one at its queue and offset, intact (CRC and the whole body).
func TestPullAttackRetentionAndDelete(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.MappedFileSizeCommitLog = 128 << 10
		c.MaxMessageSize = 32 << 10
	})
	setup := newClient(t)
	const topic, doomed, queues = "Ret", "Doomed", 4
	createTopic(t, setup, b.Addr(), topic, queues)
	createTopic(t, setup, b.Addr(), doomed, 2)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var (
		wg                                                sync.WaitGroup
		errMu                                             sync.Mutex
		errs                                              []string
		sent, pulls, records, deleted, held, heldAnswered atomic.Int64
		stop                                              atomic.Bool
	)
	fail := func(format string, args ...any) {
		errMu.Lock()
		defer errMu.Unlock()
		if len(errs) < 30 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	// Sender: 4 queues, in order, so the message at offset i of queue q is attackRecordBody(q, i).
	var ends, mins [queues]atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := newClient(t)
		for i := int64(0); i < 500 && ctx.Err() == nil; i++ {
			for q := range queues {
				tag := "B"
				if i%9 == 0 {
					tag = "A"
				}
				r, err := attackSend(ctx, c, b.Addr(), topic, q, attackRecordBody(topic, q, i), tag)
				if err != nil || r.ResponseCode() != remoting.Success {
					fail("send q%d #%d: %v %v", q, i, err, r)
					return
				}
				if got := r.ExtFields["queueOffset"]; got != strconv.FormatInt(i, 10) {
					fail("send q%d #%d: stored at %s", q, i, got)
					return
				}
				ends[q].Store(i + 1)
				sent.Add(1)
			}
		}
	}()
	// Retention: delete the oldest segment again and again.
	wg.Add(1)
	go func() {
		defer wg.Done()
		// One deletion per tick: paced so that there are records left to read.
		pace := time.NewTicker(15 * time.Millisecond)
		defer pace.Stop()
		for i := 0; i < 4000 && !stop.Load(); i++ {
			n, err := b.store.DeleteExpiredFiles(time.Now().Add(time.Hour), 1)
			if err != nil {
				fail("delete expired: %v", err)
				return
			}
			deleted.Add(int64(n))
			<-pace.C
		}
	}()
	clients := []*remoting.Client{newClient(t), newClient(t), newClient(t)}
	for w := range 9 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			c := clients[w%len(clients)]
			for !stop.Load() && ctx.Err() == nil {
				q := r.IntN(queues)
				end := ends[q].Load()
				lo := mins[q].Load()
				off := lo - 2 + r.Int64N(max(1, end-lo+5))
				sub, suspend := "*", 0
				switch r.IntN(4) {
				case 0:
					sub = "A" // skips 8 of 9
				case 1:
					sub = "A || C"
				}
				if r.IntN(3) == 0 {
					suspend = 50 + r.IntN(300)
				}
				resp, err := attackPull(ctx, c, b.Addr(), topic, q, off, sub, suspend)
				if err != nil {
					if ctx.Err() == nil {
						fail("pull q%d at %d: %v", q, off, err)
					}
					return
				}
				pulls.Add(1)
				if v, err := strconv.ParseInt(resp.ExtFields["minOffset"], 10, 64); err == nil && v > mins[q].Load() {
					mins[q].Store(v)
				}
				if resp.ResponseCode() != remoting.Success {
					continue
				}
				ms, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
				if err != nil {
					fail("pull q%d at %d: decode: %v", q, off, err)
					continue
				}
				prev := off - 1
				for _, m := range ms {
					records.Add(1)
					if m.Topic != topic || m.QueueID != int32(q) || m.QueueOffset <= prev {
						fail("pull q%d at %d (%s): record of %s q%d offset %d after %d", q, off, sub, m.Topic, m.QueueID, m.QueueOffset, prev)
						continue
					}
					prev = m.QueueOffset
					if want := attackRecordBody(topic, q, m.QueueOffset); !bytes.Equal(m.Body, want) {
						fail("pull q%d at %d: offset %d body %.30q, want %.30q", q, off, m.QueueOffset, m.Body, want)
					}
					if sub == "A" && m.Tag() != "A" {
						fail("pull q%d at %d: filter A returned tag %q", q, off, m.Tag())
					}
					if m.Property("q") != strconv.Itoa(q) {
						fail("pull q%d at %d: property q=%q", q, off, m.Property("q"))
					}
				}
			}
		}()
	}
	// The doomed topic: held pulls on it, then it is deleted under them.
	doomedClient := newClient(t)
	for q := range 2 {
		if r, err := attackSend(ctx, setup, b.Addr(), doomed, q, []byte("x"), "A"); err != nil || r.ResponseCode() != remoting.Success {
			t.Fatalf("send to %s: %v %v", doomed, err, r)
		}
	}
	for i := range 20 {
		wg.Add(1)
		held.Add(1)
		go func() {
			defer wg.Done()
			resp, err := attackPull(ctx, doomedClient, b.Addr(), doomed, i%2, 1, "*", 3000)
			if err != nil {
				fail("held pull of deleted topic: %v", err)
				return
			}
			heldAnswered.Add(1)
			if resp.ResponseCode() == remoting.Success {
				ms, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
				if err != nil {
					fail("held pull of deleted topic: %v", err)
				}
				for _, m := range ms {
					if m.Topic != doomed || m.QueueID != int32(i%2) || m.QueueOffset < 1 {
						fail("held pull of deleted topic returned %s q%d @%d %q", m.Topic, m.QueueID, m.QueueOffset, m.Body)
					}
				}
			}
		}()
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return heldCount(b) >= 20 }, "20 held pulls on", doomed)
	if r := invoke(t, setup, b.Addr(), remoting.NewRequest(remoting.DeleteTopicInBroker, map[string]string{"topic": doomed}, nil)); r.ResponseCode() != remoting.Success {
		t.Fatalf("delete topic: %d %s", r.Code, r.Remark)
	}
	// Re-create it and send: the held pulls may be woken by the new topic's messages.
	createTopic(t, setup, b.Addr(), doomed, 2)
	for q := range 2 {
		if r, err := attackSend(ctx, setup, b.Addr(), doomed, q, []byte("second life"), "A"); err != nil || r.ResponseCode() != remoting.Success {
			t.Fatalf("send to re-created %s: %v %v", doomed, err, r)
		}
	}

	// Generous: at load average 35 (two cores) a run needed more than a minute.
	testkit.WaitFor(t, 3*time.Minute, func() bool {
		return sent.Load() >= 500*queues && heldAnswered.Load() == held.Load() && deleted.Load() >= 5
	}, "sends done, held pulls answered, segments deleted")
	stop.Store(true)
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	t.Logf("sent %d, pulls %d, records checked %d, segments deleted %d, held pulls of the deleted topic answered %d/%d",
		sent.Load(), pulls.Load(), records.Load(), deleted.Load(), heldAnswered.Load(), held.Load())
}

func heldCount(b *Broker) int {
	b.held.mu.Lock()
	defer b.held.mu.Unlock()
	return b.held.n
}

// TestHeldPullsWokenWhileConnectionCloses: rounds of 40 pulls held on one connection
// (four queues, tag filters), then a send that wakes them racing the connection's close.
// Every hold must end (the broker's held count back to 0), the broker must keep serving
// a fresh connection with intact records, and no goroutine may be left (goleak in
// TestMain).
func TestHeldPullsWokenWhileConnectionCloses(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	setup := newClient(t)
	const topic, queues = "HeldClose", 4
	createTopic(t, setup, b.Addr(), topic, queues)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var next [queues]int64
	answered, dropped := 0, 0
	for round := range 15 {
		c, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range 40 {
			q := i % queues
			sub := []string{"*", "A", "B", "A || B"}[i%4]
			off := next[q]
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := attackPull(ctx, c, b.Addr(), topic, q, off, sub, 20000)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					dropped++
					return
				}
				answered++
				if resp.ResponseCode() != remoting.Success {
					return
				}
				ms, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
				if err != nil {
					t.Errorf("round %d: decode: %v", round, err)
				}
				for _, m := range ms {
					if m.QueueID != int32(q) || m.QueueOffset < off || !bytes.Equal(m.Body, attackRecordBody(topic, q, m.QueueOffset)) {
						t.Errorf("round %d: pull q%d at %d got q%d @%d %.30q", round, q, off, m.QueueID, m.QueueOffset, m.Body)
					}
				}
			}()
		}
		testkit.WaitFor(t, 20*time.Second, func() bool { return heldCount(b) >= 40 }, "40 held pulls")
		done := make(chan struct{})
		go func() {
			defer close(done)
			for q := range queues {
				for k, tag := range []string{"A", "B"} { // wakes every filter
					if r, err := attackSend(ctx, setup, b.Addr(), topic, q, attackRecordBody(topic, q, next[q]+int64(k)), tag); err != nil || r.ResponseCode() != remoting.Success {
						t.Errorf("send: %v %v", err, r)
					}
				}
			}
		}()
		if round%3 != 2 {
			_ = c.Close() // racing the wake-ups
		}
		<-done
		for q := range queues {
			next[q] += 2
		}
		wg.Wait()
		_ = c.Close()
		testkit.WaitFor(t, 25*time.Second, func() bool { return heldCount(b) == 0 }, "held pulls ended after round", round)
	}
	for q := range queues {
		for off := int64(0); off < next[q]; { // pages: a pull is capped at 256 KiB
			resp := pull(t, setup, b.Addr(), "gAtk", topic, q, off, "*", 0)
			ms, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
			if resp.ResponseCode() != remoting.Success || err != nil || len(ms) == 0 {
				t.Fatalf("final pull q%d at %d: %d %s, %d records, %v", q, off, resp.Code, resp.Remark, len(ms), err)
			}
			for _, m := range ms {
				if m.QueueOffset != off || !bytes.Equal(m.Body, attackRecordBody(topic, q, off)) {
					t.Fatalf("final pull q%d: record at %d (want %d) differs", q, m.QueueOffset, off)
				}
				off++
			}
		}
	}
	t.Logf("held pulls answered %d, dropped with their connection %d", answered, dropped)
}
