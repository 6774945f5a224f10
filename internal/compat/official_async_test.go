package compat_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/sluicemq/sluice/internal/testkit"
)

// TestOfficialAsyncSendBursts: the official producer's SendAsync with hundreds of sends
// in flight on one connection, which the broker's reader stores in runs (one commitlog
// write per run). Every send succeeds; an official consumer receives each message once,
// intact, in the queue and at the queue offset its SendResult gave.
func TestOfficialAsyncSendBursts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const topic, n = "CompatAsyncBursts", 800
	e.createTopic(topic, 4)
	p := newOfficialProducer(t, e, "async-bursts")

	type placed struct {
		queue  int
		offset int64
		err    error
	}
	results := make([]placed, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for seq := range n {
		wg.Add(1)
		err := p.SendAsync(ctx, func(_ context.Context, res *primitive.SendResult, err error) {
			defer wg.Done()
			switch {
			case err != nil:
				results[seq].err = err
			case res.Status != primitive.SendOK || res.MessageQueue == nil:
				results[seq].err = errStatus(res)
			default:
				results[seq] = placed{res.MessageQueue.QueueId, res.QueueOffset, nil}
			}
		}, officialMessage(specMsg(topic, seq)))
		if err != nil {
			wg.Done()
			results[seq].err = err
		}
	}
	wg.Wait()
	for seq, r := range results {
		if r.err != nil {
			t.Fatalf("send %d: %v", seq, r.err)
		}
	}
	col := newCollector(topic)
	stop := officialConsumer(t, e, "compat_async_bursts", "bursts-1", topic, "*", col)
	seqs := seqRange(0, n)
	testkit.WaitFor(t, 60*time.Second, func() bool { return col.distinct() >= n }, func() string { return col.missing(seqs) })
	stop()
	per := col.checkExactly(t, "compat_async_bursts", seqs)
	t.Logf("%d async sends, received %v", n, per)
	col.mu.Lock()
	defer col.mu.Unlock()
	for seq, want := range results {
		if got := col.where[seq]; got.queueID != want.queue || got.queueOffset != want.offset {
			t.Errorf("message %d at queue %d offset %d, its SendResult says queue %d offset %d", seq, got.queueID, got.queueOffset, want.queue, want.offset)
		}
	}
}

type statusError struct{ res *primitive.SendResult }

func (e statusError) Error() string { return "send result " + e.res.String() }

func errStatus(res *primitive.SendResult) error { return statusError{res} }
