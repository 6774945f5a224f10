package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

func TestParseResetTime(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"end":                       {},
		"now":                       now,
		"now-30m":                   now.Add(-30 * time.Minute),
		"1700000000123":             time.UnixMilli(1700000000123),
		"2026-01-02T15:04:05Z":      time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC),
		"2026-01-02T15:04:05+02:00": time.Date(2026, 1, 2, 13, 4, 5, 0, time.UTC),
		"2026-01-02 15:04:05":       time.Date(2026, 1, 2, 15, 4, 5, 0, time.Local),
	} {
		got, err := parseResetTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "yesterday", "now-x", "-5", "2026-13-01 00:00:00"} {
		if _, err := parseResetTime(bad, now); err == nil || !strings.Contains(err.Error(), "--time") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// The offset, dlq and group commands against a real broker: a consumer with no
// retries fills the DLQ; dlq list shows the dead letters, dlq resend sends them back
// (once), offset show/reset move the group, group consistency reports a client that
// subscribes differently and fails.
func TestConsumerAdminCommands(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	ns := b.NamesrvAddr()
	if _, err := run(t, "admin", "--namesrv", ns, "topic", "create", "--topic", "CliT", "--queues", "1"); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{ns}, Group: "cli-pg", Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	for _, body := range []string{"m1", "m2", "m3"} {
		if _, err := p.SendSync(context.Background(), message.NewMessage("CliT", []byte(body)).SetTag("Tg").SetKeys("k-"+body)); err != nil {
			t.Fatal(err)
		}
	}
	newConsumer := func(instance, expr string, h func(context.Context, []*message.MessageExt) (message.ConsumeResult, error)) *consumer.PushConsumer {
		c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{ns}, Group: "cli-g", InstanceName: instance,
			ConsumeFromWhere: consumer.ConsumeFromFirstOffset, MaxReconsumeTimes: consumer.Retries(0),
			RebalanceInterval: 200 * time.Millisecond, PersistOffsetInterval: 100 * time.Millisecond, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Subscribe("CliT", expr, h); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		return c
	}
	failing := newConsumer("c1", "*", func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return message.ReconsumeLater, nil
	})
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{ns}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testkit.WaitFor(t, 20*time.Second, cond, what)
	}
	waitFor("3 dead letters", func() bool {
		l, err := a.ListDLQ(context.Background(), "cli-g", admin.DLQListOptions{})
		return err == nil && len(l) == 3
	})

	out, err := run(t, "admin", "--namesrv", ns, "dlq", "list", "--group", "cli-g", "--body")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CliT", "k-m1", "k-m3", "body: m2", "3 dead letter(s)", "false"} {
		if !strings.Contains(out, want) {
			t.Fatalf("dlq list lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, "admin", "--namesrv", ns, "dlq", "list", "--group", "cli-g", "--json", "--max", "1")
	if err != nil || !strings.Contains(out, `"originTopic": "CliT"`) || strings.Count(out, `"msgId"`) != 1 {
		t.Fatalf("dlq list --json --max 1: %v\n%s", err, out)
	}

	// Stop the failing consumer; a healthy one gets the re-driven letters.
	if err := failing.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	newConsumer("c2", "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			if m.ReconsumeTimes != 0 || m.Topic != "CliT" {
				t.Errorf("re-driven message %+v", m)
			}
			got <- string(m.Body)
		}
		return message.ConsumeSuccess, nil
	})
	out, err = run(t, "admin", "--namesrv", ns, "dlq", "resend", "--group", "cli-g", "--to-original-topic")
	if err != nil || !strings.Contains(out, "3 resent, 0 failed") || !strings.Contains(out, "keys k-m2") || !strings.Contains(out, "to CliT") {
		t.Fatalf("dlq resend: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for len(seen) < 3 {
		select {
		case b := <-got:
			seen[b] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("re-driven messages received: %v", seen)
		}
	}
	out, err = run(t, "admin", "--namesrv", ns, "dlq", "resend", "--group", "cli-g")
	if err != nil || !strings.Contains(out, "0 resent, 0 failed") {
		t.Fatalf("second dlq resend: %v\n%s", err, out)
	}

	waitFor("the group's offset at the end", func() bool {
		offs, err := a.ConsumerOffsets(context.Background(), "cli-g", "CliT")
		return err == nil && offs[0].Committed == 6
	})
	out, err = run(t, "admin", "--namesrv", ns, "offset", "show", "--group", "cli-g", "--topic", "CliT")
	if err != nil || !strings.Contains(out, "total lag 0") {
		t.Fatalf("offset show: %v\n%s", err, out)
	}
	out, err = run(t, "admin", "--namesrv", ns, "offset", "reset", "--group", "cli-g", "--topic", "CliT", "--time", "0", "--yes")
	if err != nil || !strings.Contains(out, "queue 0 -> 0") {
		t.Fatalf("offset reset: %v\n%s", err, out)
	}
	for len(seen) < 6 { // the running consumer gets all 6 again (3 originals, 3 re-driven)
		select {
		case b := <-got:
			seen[b+"-again"] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("after the reset: %v", seen)
		}
	}
	if _, err := run(t, "admin", "--namesrv", ns, "offset", "reset", "--group", "cli-g", "--topic", "CliT", "--time", "tomorrow"); err == nil {
		t.Fatal("bad --time accepted")
	}

	out, err = run(t, "admin", "--namesrv", ns, "group", "consistency", "--group", "cli-g")
	if err != nil || !strings.Contains(out, "is consistent") {
		t.Fatalf("group consistency: %v\n%s", err, out)
	}
	newConsumer("c3", "OtherTag", func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return message.ConsumeSuccess, nil
	})
	waitFor("the inconsistency", func() bool {
		r, err := a.GroupConsistency(context.Background(), "cli-g")
		return err == nil && !r.Consistent
	})
	out, err = run(t, "admin", "--namesrv", ns, "group", "consistency", "--group", "cli-g")
	if !errors.Is(err, errInconsistent) || !strings.Contains(out, "NOT consistent") || !strings.Contains(out, "OtherTag") || !strings.Contains(out, "@c3") {
		t.Fatalf("inconsistent group: %v\n%s", err, out)
	}
}
