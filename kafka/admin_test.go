package kafka

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// Dead letters are listed, re-driven once to the group's first retry topic (only this
// group gets them again, with a fresh retry budget, under their original topic), and a
// second run re-drives nothing; --to-original-topic sends them to their topic instead.
func TestDLQListAndResend(t *testing.T) {
	c := newCluster(t, 1, "bills")
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	ctx := ctxT(t, 40*time.Second)
	for i := 0; i < 3; i++ {
		if _, err := p.Send(ctx, message.NewMessage("bills", []byte("b"+strconv.Itoa(i))).SetKeys("bill-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	var healthy atomic.Bool
	var redriven seen
	cfg := fastConfig(t, brokers, "g-dlq")
	cfg.MaxReconsumeTimes = Retries(0)
	cons := startConsumer(t, cfg, func(c *Consumer) {
		_ = c.Subscribe("bills", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if !healthy.Load() {
				return message.ReconsumeLater, errors.New("ledger closed")
			}
			redriven.add(msgs[0])
			return message.ConsumeSuccess, nil
		})
	})
	defer shutdown(t, cons, 10*time.Second)
	cl := clientFor(t, brokers)
	testkit.WaitFor(t, 15*time.Second, func() bool {
		dl, err := ListDLQ(ctx, brokers, "g-dlq")
		return err == nil && len(dl) == 3
	}, "three dead letters")
	dl, _ := ListDLQ(ctx, brokers, "g-dlq")
	locs := map[string]bool{}
	for i, d := range dl {
		locs[d.OriginLocation] = true
		if d.OriginTopic != "bills" || d.ReconsumeTimes != 1 || d.LastError != "ledger closed" || d.MsgID == "" {
			t.Fatalf("dead letter %d: %+v", i, d)
		}
	}
	if !locs["0@0"] || !locs["0@1"] || !locs["0@2"] {
		t.Fatalf("origins %v", locs)
	}
	healthy.Store(true)
	res, err := ResendDLQ(ctx, brokers, "g-dlq", ResendOptions{})
	if err != nil || len(res.Resent) != 3 || res.Skipped != 0 || res.Resent[0].To != RetryTopic("g-dlq", 1) || res.Resent[0].MsgID != dl[0].MsgID {
		t.Fatalf("resend: %+v %v", res, err)
	}
	testkit.WaitFor(t, 15*time.Second, func() bool { return redriven.len() == 3 }, "re-driven dead letters consumed")
	for _, m := range redriven.all() {
		if m.Topic != "bills" || m.ReconsumeTimes != 0 || m.Property(message.PropertyRetryTopic) != RetryTopic("g-dlq", 1) {
			t.Fatalf("re-driven %+v", m)
		}
	}
	res, err = ResendDLQ(ctx, brokers, "g-dlq", ResendOptions{})
	if err != nil || len(res.Resent) != 0 || res.Skipped != 3 {
		t.Fatalf("second resend: %+v %v", res, err)
	}
	// To the original topic (the re-drive mark set back to the start first): every group
	// of "bills" gets them, as plain records without Sluice's retry headers.
	if _, err := cl.OffsetCommit(ctx, &kafkago.OffsetCommitRequest{GroupID: ResendGroup("g-dlq"), GenerationID: -1,
		Topics: map[string][]kafkago.OffsetCommit{DLQTopic("g-dlq"): {{Partition: 0, Offset: 0}}}}); err != nil {
		t.Fatal(err)
	}
	res, err = ResendDLQ(ctx, brokers, "g-dlq", ResendOptions{ToOriginalTopic: true})
	if err != nil || len(res.Resent) != 3 || res.Resent[2].To != "bills" {
		t.Fatalf("resend to the original topic: %+v %v", res, err)
	}
	testkit.WaitFor(t, 15*time.Second, func() bool { return redriven.len() == 6 }, "dead letters consumed from their topic")
	for _, m := range redriven.all()[3:] {
		if m.Topic != "bills" || m.Property(message.PropertyRetryTopic) != "" || m.QueueOffset < 3 {
			t.Fatalf("re-driven to the original topic: %+v", m)
		}
	}
	if _, err := ResendDLQ(ctx, brokers, "no-such-group", ResendOptions{}); err == nil {
		t.Fatal("resend for a group without a dead-letter topic succeeded")
	}
}
