package producer

// Helpers for tests against the real Sluice broker: start one with a given config,
// create topics, read queue offsets, and collect deliveries with Sluice's push consumer.

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// createTopic creates topic with queues queues on every broker and waits for its route
// (to name brokerNames, when given).
func createTopic(t testing.TB, namesrvs []string, topic string, queues int, brokerNames ...string) {
	t.Helper()
	adm, err := admin.New(admin.Config{NamesrvAddrs: namesrvs, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: queues}); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if _, err := adm.WaitTopicRoute(ctx, topic, brokerNames...); err != nil {
		t.Fatal(err)
	}
}

// maxOffsets returns the max offset of queues 0..n-1 of topic on the broker at addr
// (GET_MAX_OFFSET, RocketMQ request code 30).
func maxOffsets(t testing.TB, addr, topic string, n int) []int64 {
	t.Helper()
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := make([]int64, n)
	for q := 0; q < n; q++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rc.InvokeSync(ctx, addr, remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": topic, "queueId": strconv.Itoa(q)}, nil))
		cancel()
		if err != nil {
			t.Fatalf("max offset %s/%d: %v", topic, q, err)
		}
		if resp.ResponseCode() == remoting.Success {
			out[q], err = resp.ExtInt64("offset", true)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// delivery is one message a test consumer received, and when.
type delivery struct {
	msg *message.MessageExt
	at  time.Time
}

// collector records deliveries keyed by a user property.
type collector struct {
	prop string
	mu   sync.Mutex
	got  map[string][]delivery
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func (c *collector) get(key string) []delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]delivery(nil), c.got[key]...)
}

// pull reads up to 32 messages of topic queue q from offset on the broker at addr
// (PULL_MESSAGE, RocketMQ request code 11, subscription "*" sent with the request, no
// long polling). It returns the messages and the next offset to pull from.
func pull(ctx context.Context, rc *remoting.Client, addr, group, topic string, q int, offset int64) ([]*message.MessageExt, int64, error) {
	req := remoting.NewRequest(remoting.PullMessage, map[string]string{
		"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(q), "queueOffset": strconv.FormatInt(offset, 10),
		"maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
		"subscription": "*", "subVersion": "0", "expressionType": "TAG",
	}, nil)
	resp, err := rc.InvokeSync(ctx, addr, req)
	if err != nil {
		return nil, offset, err
	}
	next := offset
	if n, err := resp.ExtInt64("nextBeginOffset", false); err == nil && resp.ExtFields["nextBeginOffset"] != "" {
		next = n
	}
	if resp.ResponseCode() != remoting.Success {
		return nil, next, nil
	}
	msgs, err := message.DecodeRecords(resp.Body, message.DecodeOptions{Decompress: true})
	return msgs, next, err
}

// poll starts a goroutine that pulls queues 0..queues-1 of topic from offset 0 every
// 20 ms and records each message by the value of property prop, with the time it was
// first seen (so times are late by up to one poll). It stops at t.Cleanup.
func poll(t *testing.T, addr, topic string, queues int, prop string) *collector {
	t.Helper()
	col := &collector{prop: prop, got: map[string][]delivery{}}
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		next := make([]int64, queues)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			for q := 0; q < queues; q++ {
				for ctx.Err() == nil {
					pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
					msgs, n, err := pull(pctx, rc, addr, "producer_test_poller", topic, q, next[q])
					pcancel()
					if err != nil {
						break
					}
					now := time.Now()
					col.mu.Lock()
					for _, m := range msgs {
						k := m.Property(prop)
						col.got[k] = append(col.got[k], delivery{m, now})
					}
					col.mu.Unlock()
					next[q] = n
					if len(msgs) == 0 {
						break
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = rc.Close()
	})
	return col
}
