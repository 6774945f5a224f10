package consumer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// push makes a consumer from cfg with the env's name server, a quiet logger and fast
// timers unless cfg sets them; it is shut down by t.Cleanup.
func (e *env) push(cfg Config) *PushConsumer {
	e.t.Helper()
	cfg.NamesrvAddrs = e.namesrv
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.RebalanceInterval == 0 {
		cfg.RebalanceInterval = 500 * time.Millisecond
	}
	if cfg.PersistOffsetInterval == 0 {
		cfg.PersistOffsetInterval = 100 * time.Millisecond
	}
	c, err := NewPushConsumer(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { shutdown(e.t, c) })
	return c
}

// committed returns the group's committed offset of queue q of topic (-1 = none).
func (e *env) committed(group, topic string, q int) int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := e.admin.ConsumerOffsets(ctx, group, topic)
	if err != nil {
		e.t.Fatalf("consumer offsets of %s/%s: %v", group, topic, err)
	}
	for _, o := range offs {
		if o.Queue.QueueID == q {
			return o.Committed
		}
	}
	e.t.Fatalf("queue %d of %s not in the route", q, topic)
	return 0
}

// sendBodies sends one message per body to topic (tag "T", key = body) and returns
// their queue offsets by body.
func sendBodies(t *testing.T, p *producer.Producer, topic string, bodies ...string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, b := range bodies {
		r, err := p.SendSync(context.Background(), message.NewMessage(topic, []byte(b)).SetTag("T").SetKeys("key-"+b))
		if err != nil {
			t.Fatalf("send %s: %v", b, err)
		}
		out[b] = r.QueueOffset
	}
	return out
}

// delivery is one handler call's view of one message.
type delivery struct {
	who            string
	body           string
	topic          string
	reconsumeTimes int32
	queue          message.MessageQueue
	offset         int64
	at             time.Time
}

func (d delivery) String() string { return fmt.Sprintf("%s(rt=%d)", d.body, d.reconsumeTimes) }

// recorder keeps every delivery in order.
type recorder struct {
	mu  sync.Mutex
	all []delivery
}

func (r *recorder) add(who string, m *message.MessageExt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, delivery{who: who, body: string(m.Body), topic: m.Topic, reconsumeTimes: m.ReconsumeTimes,
		queue: message.MessageQueue{Topic: m.Topic, BrokerName: m.BrokerName, QueueID: int(m.QueueID)}, offset: m.QueueOffset, at: time.Now()})
}

func (r *recorder) list() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.all...)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

func (r *recorder) bodies() []string {
	var out []string
	for _, d := range r.list() {
		out = append(out, d.String())
	}
	return out
}

// dlq lists the group's dead letters.
func (e *env) dlq(group string) []admin.DLQMessage {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := e.admin.ListDLQ(ctx, group, admin.DLQListOptions{})
	if err != nil {
		e.t.Fatalf("list DLQ of %s: %v", group, err)
	}
	return l
}
