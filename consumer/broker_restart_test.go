package consumer

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// TestResumesSoonAfterBrokerRestart: a broker restarted on the same address has forgotten
// the consumer's subscription; the consumer heartbeats it as soon as it reconnects, so
// delivery resumes within seconds, not at the next 30 s heartbeat (the default kept here).
func TestResumesSoonAfterBrokerRestart(t *testing.T) {
	e := newEnv(t)
	e.createTopic("Restart", 1)
	p := e.producer()
	c, err := NewPushConsumer(Config{NamesrvAddrs: e.namesrv, Group: "restart-g", ConsumeFromWhere: ConsumeFromFirstOffset, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, c) // before the broker cleanups: it persists offsets on the way out
	col := newCollector()
	if err := c.Subscribe("Restart", "*", col.handler("c")); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	send(t, p, "Restart", 1, "before")
	testkit.WaitFor(t, 15*time.Second, func() bool { return col.total() == 1 }, "the first message")

	// Restart the broker on the same data dir and addresses.
	addr, ns, dir := e.broker.Addr(), e.namesrv[0], e.broker.DataDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.broker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var b2 *broker.Broker
	// The old listeners' ports may still be in use for a moment: retry the bind, 100 ms
	// apart.
	testkit.EventuallyEvery(20*time.Second, 100*time.Millisecond, func() bool {
		if b2, err = broker.New(broker.Config{ListenAddr: addr, NamesrvListenAddr: ns, StorePathRootDir: dir, Logger: quiet}); err != nil {
			return true
		}
		err = b2.Start()
		return err == nil || !errors.Is(err, syscall.EADDRINUSE)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b2.Shutdown(context.Background()) })
	e.broker = b2

	restarted := time.Now()
	testkit.WaitFor(t, 20*time.Second, func() bool {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		_, err := p.SendSync(sctx, message.NewMessage("Restart", []byte("after")))
		return err == nil
	}, "a send to the restarted broker")
	testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= 2 }, "the message sent after the restart")
	if d := time.Since(restarted); d > 15*time.Second {
		t.Fatalf("delivery resumed %v after the restart; the consumer waited for its periodic heartbeat", d)
	}
}
