package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/kafka"
	"github.com/sluicemq/sluice/message"
)

// quickstart --kafka (bare: an embedded cluster) runs the payment scenario on Kafka:
// both groups get what they subscribed to, one payment comes back through the retry
// topic, the malformed event is a dead letter, the duplicate is skipped.
func TestQuickstartKafkaEmbedded(t *testing.T) {
	out, stderr, err := execRoot(t, 60*time.Second, "quickstart", "--kafka")
	if err != nil {
		t.Fatalf("quickstart --kafka failed: %v\n%s", err, out)
	}
	if stderr != "" {
		t.Errorf("quickstart --kafka without --verbose wrote logs to stderr:\n%s", stderr)
	}
	for _, want := range []string{
		"started an embedded Kafka-protocol cluster (kfake)",
		`consumer group order_service (subscribed "PaySuccess || PayFailed") received 13 message(s)`,
		`consumer group points_service (subscribed "PaySuccess") received 10 message(s)`,
		"ORD-1002 failed at its first delivery to points_service and came back through points_service.retry.1: deliveries with reconsume times [0 1]",
		"Dedup skipped 1 duplicate(s); points added 1 time(s)",
		"dead letter in points_service.dlq: key ORD-BAD1 from PayEvents",
		"after 3 deliveries",
		"quickstart on Kafka OK in",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// "--kafka host:port" with a space: the address is taken as the argument (nothing
	// listens there, so the run fails naming the topic creation).
	_, _, err = execRoot(t, 30*time.Second, "quickstart", "--kafka", "127.0.0.1:1", "--timeout", "3s")
	if err == nil || !strings.Contains(err.Error(), "create topics") {
		t.Fatalf("quickstart --kafka 127.0.0.1:1: %v, want a topic creation error", err)
	}
}

// admin kafka dlq list shows a group's dead letters with origin, count and last error;
// resend re-drives them once to the group's retry topic, and a second run sends only
// dead letters that arrived since.
func TestAdminKafkaDLQ(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "bills"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: brokers, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(ctx) }()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, message.NewMessage("bills", []byte("b1")).SetKeys("bill-1")); err != nil {
		t.Fatal(err)
	}
	cons, err := kafka.NewConsumer(kafka.Config{Brokers: brokers, Group: "billing", MaxReconsumeTimes: kafka.Retries(0),
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second, FetchMaxWait: 100 * time.Millisecond,
		JoinGroupBackoff: 100 * time.Millisecond, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	_ = cons.Subscribe("bills", "*", func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return message.ReconsumeLater, errors.New("ledger closed\tat noon\n(retry later)")
	})
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cons.Shutdown(ctx) }()
	var out string
	testkit.WaitFor(t, 15*time.Second, func() bool {
		out, err = run(t, "admin", "kafka", "--brokers", brokers[0], "dlq", "list", "--group", "billing")
		return err == nil && strings.Contains(out, "1 dead letter(s)")
	}, "dlq list shows the dead letter")
	if !strings.Contains(out, "bills") || !strings.Contains(out, "0@0") || !strings.Contains(out, `ledger closed\tat noon\n(retry later)`) || !strings.Contains(out, "bill-1") {
		// The table keeps one line per dead letter: control characters are escaped.
		t.Fatalf("dlq list:\n%s", out)
	}
	out, err = run(t, "admin", "kafka", "--brokers", brokers[0], "dlq", "list", "--group", "billing", "--json", "--body")
	if err != nil || !strings.Contains(out, `"lastError": "ledger closed\tat noon\n(retry later)"`) || !strings.Contains(out, `"body": "b1"`) {
		t.Fatalf("dlq list --json: %v\n%s", err, out)
	}
	out, err = run(t, "admin", "kafka", "--brokers", brokers[0], "dlq", "resend", "--group", "billing")
	if err != nil || !strings.Contains(out, "to billing.retry.1") || !strings.Contains(out, "1 resent, 0 re-driven before") {
		t.Fatalf("dlq resend: %v\n%s", err, out)
	}
	// The consumer still fails it: the re-driven copy becomes a second dead letter, and
	// a second resend sends only that one.
	testkit.WaitFor(t, 15*time.Second, func() bool {
		out, err = run(t, "admin", "kafka", "--brokers", brokers[0], "dlq", "list", "--group", "billing")
		return err == nil && strings.Contains(out, "2 dead letter(s)")
	}, "the re-driven copy failed again")
	out, err = run(t, "admin", "kafka", "--brokers", brokers[0], "dlq", "resend", "--group", "billing", "-o", "json")
	var res struct {
		Group  string
		Resent []struct {
			Partition int
			Offset    int64
			To        string
		}
		Skipped int
	}
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Group != "billing" || len(res.Resent) != 1 ||
		res.Resent[0].Partition != 0 || res.Resent[0].Offset != 1 || res.Resent[0].To != "billing.retry.1" || res.Skipped != 1 {
		t.Fatalf("second dlq resend -o json: %v\n%s", err, out)
	}
	if _, err := run(t, "admin", "kafka", "--brokers", brokers[0], "dlq", "list", "--group", "nobody"); err == nil {
		t.Fatal("dlq list of a group without a dead-letter topic succeeded")
	}
}
