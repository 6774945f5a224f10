package consumer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func TestPullConsumerExplicitQueueOffsetAndCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("PullT", 2)
	p := e.producer()
	s := send(t, p, "PullT", 40, "p", "A", "B")

	pc, err := NewPullConsumer(PullConfig{NamesrvAddrs: e.namesrv, Group: "pullg", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pc.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if err := pc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mqs, err := pc.MessageQueues(ctx, "PullT")
	if err != nil || len(mqs) != 2 {
		t.Fatalf("queues %v %v", mqs, err)
	}
	got := map[string]bool{}
	for _, mq := range mqs {
		if off, err := pc.CommittedOffset(ctx, mq); err != nil || off != -1 {
			t.Fatalf("fresh group's offset %d %v", off, err)
		}
		off := int64(0)
		for i := 0; ; i++ {
			if i > 100 {
				t.Fatal("pull loop did not end")
			}
			r, err := pc.Pull(ctx, PullRequest{Queue: mq, Expression: "A", Offset: off, MaxNums: 5})
			if err != nil {
				t.Fatal(err)
			}
			if r.MaxOffset != s.ends[mq] {
				t.Fatalf("max offset %d, want %d", r.MaxOffset, s.ends[mq])
			}
			if r.Status == PullNoNewMsg {
				break
			}
			if r.Status != PullFound && r.Status != PullNoMatchedMsg {
				t.Fatalf("status %v", r.Status)
			}
			if len(r.Messages) > 5 {
				t.Fatalf("%d messages for MaxNums 5", len(r.Messages))
			}
			for _, m := range r.Messages {
				if m.Tag() != "A" || m.QueueOffset < off {
					t.Fatalf("pulled %+v", m)
				}
				got[string(m.Body)] = true
			}
			off = r.NextBeginOffset
		}
		if off != s.ends[mq] {
			t.Fatalf("ended at %d, want %d", off, s.ends[mq])
		}
		// Nothing is committed until asked.
		if c, _ := pc.CommittedOffset(ctx, mq); c != -1 {
			t.Fatalf("offset %d committed without CommitOffset", c)
		}
		if err := pc.CommitOffset(ctx, mq, off); err != nil {
			t.Fatal(err)
		}
		if c, err := pc.CommittedOffset(ctx, mq); err != nil || c != off {
			t.Fatalf("committed %d %v, want %d", c, err, off)
		}
		if m, err := pc.MaxOffset(ctx, mq); err != nil || m != off {
			t.Fatalf("max %d %v", m, err)
		}
		if m, err := pc.MinOffset(ctx, mq); err != nil || m != 0 {
			t.Fatalf("min %d %v", m, err)
		}
	}
	want := 0
	for _, tag := range s.bodies {
		if tag == "A" {
			want++
		}
	}
	if len(got) != want {
		t.Fatalf("pulled %d TagA messages, want %d", len(got), want)
	}

	// Beyond the end: offset illegal, pointing back at the end.
	r, err := pc.Pull(ctx, PullRequest{Queue: mqs[0], Offset: s.ends[mqs[0]] + 10})
	if err != nil || r.Status != PullOffsetIllegal || r.NextBeginOffset != s.ends[mqs[0]] {
		t.Fatalf("pull past the end: %+v %v", r, err)
	}
	// Long polling: a pull at the end waits for the next message.
	mq0 := mqs[0]
	done := make(chan *PullResult, 1)
	go func() {
		r, err := pc.Pull(ctx, PullRequest{Queue: mq0, Offset: s.ends[mq0], LongPoll: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	testkit.WaitFor(t, 10*time.Second, func() bool {
		r, err := p.SendSync(ctx, message.NewMessage("PullT", []byte("late")).SetTag("A"))
		return err == nil && r.Queue.QueueID == mq0.QueueID
	}, "a message to mq0")
	select {
	case r := <-done:
		if r == nil || r.Status != PullFound || string(r.Messages[0].Body) != "late" {
			t.Fatalf("long poll answered %+v", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("long poll did not return the new message")
	}

	// Bad requests name the field.
	for name, req := range map[string]PullRequest{
		"Offset":   {Queue: mq0, Offset: -1},
		"MaxNums":  {Queue: mq0, MaxNums: 33},
		"LongPoll": {Queue: mq0, LongPoll: time.Hour},
		"Queue":    {Queue: message.MessageQueue{Topic: "PullT"}},
	} {
		if _, err := pc.Pull(ctx, req); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Dead letters are never delivered to normal subscribers: a pull of %DLQ%<group> is
// refused (the DLQ is write-only); admin tools read it with READ_QUEUE.
func TestPullConsumerCannotReadDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("DeadT", 1)
	p := e.producer()
	sendBodies(t, p, "DeadT", "doomed")
	c := e.push(Config{Group: "deadg", ConsumeFromWhere: ConsumeFromFirstOffset, MaxReconsumeTimes: Retries(0)})
	rec := &recorder{}
	if err := c.Subscribe("DeadT", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		rec.add("c", msgs[0])
		return message.ReconsumeLater, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return len(e.dlq("deadg")) == 1 }, "the dead letter")
	if rec.count() != 1 {
		t.Fatalf("MaxReconsumeTimes 0: %d deliveries, want 1", rec.count())
	}

	pc, err := NewPullConsumer(PullConfig{NamesrvAddrs: e.namesrv, Group: "deadg", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown(context.Background())
	dlq := message.MessageQueue{Topic: message.DLQTopic("deadg"), BrokerName: e.broker.Name(), QueueID: 0}
	_, err = pc.Pull(context.Background(), PullRequest{Queue: dlq})
	// The broker's refusal is the one answer type, with the request, the broker and
	// its address; 16 NO_PERMISSION is retryable (another broker may allow it).
	var re *remoting.ResponseError
	if !errors.As(err, &re) || re.Code != remoting.NoPermission || !strings.Contains(re.Remark, "pulling message is forbidden") || !re.Retryable() ||
		re.Request != remoting.PullMessage || re.Broker != e.broker.Name() || re.Addr == "" {
		t.Fatalf("pull of the DLQ: %v (%#v), want a *remoting.ResponseError 16 NO_PERMISSION from PULL_MESSAGE", err, re)
	}
	if mqs, err := pc.MessageQueues(context.Background(), dlq.Topic); err != nil || len(mqs) != 0 {
		t.Fatalf("readable DLQ queues %v %v", mqs, err)
	}
}
