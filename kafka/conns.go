package kafka

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"
)

// errConnsClosed is what a dial returns after a component cut its connections.
var errConnsClosed = errors.New("kafka: client is shut down")

// conns dials and remembers every connection of one component (its consumer group,
// fetch client and writers), so Shutdown can cut them all when its deadline passes: a
// kafka-go call blocked on an unreachable cluster then fails at once instead of after
// its own timeout, and no goroutine outlives the component for long.
type conns struct {
	timeout time.Duration

	mu     sync.Mutex
	closed bool
	open   map[net.Conn]struct{}
}

func newConns(dialTimeout time.Duration) *conns {
	return &conns{timeout: dialTimeout, open: make(map[net.Conn]struct{})}
}

// dial opens a TCP connection (bounded by the dial timeout and ctx) and tracks it.
func (c *conns) dial(ctx context.Context, network, address string) (net.Conn, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, errConnsClosed
	}
	d := net.Dialer{Timeout: c.timeout}
	nc, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = nc.Close()
		return nil, errConnsClosed
	}
	tc := &trackedConn{Conn: nc, owner: c}
	c.open[tc] = struct{}{}
	return tc, nil
}

// cut closes every open connection and refuses new dials.
func (c *conns) cut() {
	c.mu.Lock()
	c.closed = true
	open := c.open
	c.open = make(map[net.Conn]struct{})
	c.mu.Unlock()
	for nc := range open {
		_ = nc.(*trackedConn).Conn.Close()
	}
}

// dialer returns a kafka-go Dialer that dials through c.
func (c *conns) dialer(clientID string) *kafkago.Dialer {
	return &kafkago.Dialer{ClientID: clientID, Timeout: c.timeout, DialFunc: c.dial}
}

// transport returns a kafka-go Transport that dials through c.
func (c *conns) transport(clientID string) *kafkago.Transport {
	return &kafkago.Transport{ClientID: clientID, DialTimeout: c.timeout, Dial: c.dial, IdleTimeout: 30 * time.Second}
}

type trackedConn struct {
	net.Conn
	owner *conns
	once  sync.Once
}

func (t *trackedConn) Close() error {
	err := t.Conn.Close()
	t.once.Do(func() {
		t.owner.mu.Lock()
		delete(t.owner.open, t)
		t.owner.mu.Unlock()
	})
	return err
}

// write writes msgs with w; when Kafka answers that a topic is unknown — typically one
// created after w's transport cached the cluster's metadata (kafka-go refreshes it every
// 6 s) — it refreshes the metadata of those topics through cl, which must share w's
// transport, and tries once more. The refresh asks for auto-creation as the Java
// producer does, so a broker with auto.create.topics.enable creates a missing topic.
func write(ctx context.Context, w *kafkago.Writer, msgs ...kafkago.Message) error {
	err := w.WriteMessages(ctx, msgs...)
	if err == nil || !errors.Is(err, kafkago.UnknownTopicOrPartition) {
		return err
	}
	topics := map[string]bool{}
	for _, m := range msgs {
		topics[m.Topic] = true
	}
	req := &metadata.Request{AllowAutoTopicCreation: true}
	for t := range topics {
		req.TopicNames = append(req.TopicNames, t)
	}
	if _, merr := w.Transport.RoundTrip(ctx, w.Addr, req); merr != nil {
		return err
	}
	return w.WriteMessages(ctx, msgs...)
}
