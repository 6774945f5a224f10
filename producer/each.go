package producer

import (
	"context"
	"errors"
	"sync"

	"github.com/sluicemq/sluice/message"
)

// ErrEarlierSendFailed is the error SendEach reports for a message it did not send
// because an earlier message of msgs to the same queue failed (sending it would store it
// ahead of the failed one).
var ErrEarlierSendFailed = errors.New("producer: not sent: an earlier message to the same queue failed")

// maxEachWorkers bounds the requests SendEach has in flight at once.
const maxEachWorkers = 64

// SendEach sends msgs as if each were sent with Send, in as few requests as it can, and
// returns one error per message in msgs' order (nil: the broker stored that message).
// Each message's queue is picked by Config.Selector (HashSelector: by sharding key); the
// messages of one queue go in SEND_BATCH_MESSAGE requests (RocketMQ request code 320,
// docs/protocol.md §4.5), cut at MaxMessageSize as SplitBatch does, one request after
// another in msgs' order; the queues are served concurrently. A failed request fails its
// messages, and the later messages of its queue are not sent (ErrEarlierSendFailed), so
// per queue the broker stores a prefix of msgs' messages, in order. A part that cannot be
// a batch (a delay level, a transactional message, an invalid message) is sent one
// message at a time, stopping at the first failure likewise.
//
// With Config.Middlewares set, a batch would skip the chain (see SendBatch), so every
// message is sent with Send instead, up to 64 at once, and msgs' order is not kept.
//
// The signature is outbox.BatchSendFunc's: RelayConfig{SendBatch: p.SendEach}. Messages
// without a UNIQ_KEY get one.
func (p *Producer) SendEach(ctx context.Context, msgs []*message.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	if len(p.cfg.Middlewares) > 0 {
		p.each(len(msgs), func(i int) {
			if msgs[i] == nil {
				errs[i] = &message.ValidationError{Field: "message", Reason: "nil"}
				return
			}
			_, errs[i] = p.Send(ctx, msgs[i])
		})
		return errs
	}
	type group struct {
		mq  message.MessageQueue
		idx []int
	}
	var groups []*group
	byQueue := map[message.MessageQueue]*group{}
	for i, m := range msgs {
		if m == nil {
			errs[i] = &message.ValidationError{Field: "message", Reason: "nil"}
			continue
		}
		if err := p.checkMessage(m); err != nil {
			errs[i] = err
			continue
		}
		queues, err := p.publishQueues(ctx, m.Topic)
		if errors.Is(err, ErrNoQueue) && p.refreshRoute(ctx, m.Topic) {
			queues, err = p.publishQueues(ctx, m.Topic)
		}
		if err != nil {
			errs[i] = &SendError{Topic: m.Topic, Err: err}
			continue
		}
		mq, err := p.pick(p.cfg.Selector, m, queues, "")
		if err != nil {
			errs[i] = &SendError{Topic: m.Topic, Err: err}
			continue
		}
		g := byQueue[mq]
		if g == nil {
			g = &group{mq: mq}
			byQueue[mq] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	p.each(len(groups), func(gi int) {
		g := groups[gi]
		part := make([]*message.Message, len(g.idx))
		for j, i := range g.idx {
			part[j] = msgs[i]
		}
		p.sendQueue(ctx, g.mq, part, func(j int, err error) { errs[g.idx[j]] = err })
	})
	return errs
}

// sendQueue sends part to mq in batches, in order, reporting each message's outcome with
// set. A part SplitBatch refuses, or a batch SendBatch refuses before sending (a
// *message.ValidationError), is sent one message at a time. After the first failure the
// rest get ErrEarlierSendFailed.
func (p *Producer) sendQueue(ctx context.Context, mq message.MessageQueue, part []*message.Message, set func(int, error)) {
	chunks, err := SplitBatch(part, p.cfg.MaxMessageSize)
	if err != nil {
		p.sendSingly(ctx, mq, part, set)
		return
	}
	at := 0
	for _, c := range chunks {
		off := at
		at += len(c)
		_, err := p.SendBatch(ctx, c, WithQueue(mq), WithoutMiddlewares())
		var ve *message.ValidationError
		switch {
		case err == nil:
			for j := range c {
				set(off+j, nil)
			}
			continue
		case errors.As(err, &ve):
			if !p.sendSingly(ctx, mq, c, func(j int, err error) { set(off+j, err) }) {
				continue
			}
		default:
			for j := range c {
				set(off+j, err)
			}
		}
		for j := at; j < len(part); j++ {
			set(j, ErrEarlierSendFailed)
		}
		return
	}
}

// sendSingly sends part to mq one message at a time, in order, stopping at the first
// failure (the rest get ErrEarlierSendFailed). It reports whether something failed.
func (p *Producer) sendSingly(ctx context.Context, mq message.MessageQueue, part []*message.Message, set func(int, error)) bool {
	for j, m := range part {
		if _, err := p.SendSync(ctx, m, WithQueue(mq), WithoutMiddlewares()); err != nil {
			set(j, err)
			for k := j + 1; k < len(part); k++ {
				set(k, ErrEarlierSendFailed)
			}
			return true
		}
		set(j, nil)
	}
	return false
}

// each runs f(0..n-1) on up to maxEachWorkers goroutines and returns when all returned.
func (p *Producer) each(n int, f func(int)) {
	if n == 1 {
		f(0)
		return
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(n, maxEachWorkers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
}
