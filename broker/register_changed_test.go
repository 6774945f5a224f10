package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
)

// TestTakeChanged: the registration after a topic change carries only the topics put or
// created since the previous one; after a removal, or markAllChanged, the whole table.
func TestTakeChanged(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	tt := b.topics
	tt.takeChanged() // whatever the start left
	if got, _, all := tt.takeChanged(); got != nil || all {
		t.Fatalf("nothing changed: got %d topics, all=%v", len(got), all)
	}
	whole := len(tt.names())
	for i := range 3 {
		if err := tt.put(wire.TopicConfig{TopicName: fmt.Sprintf("Changed%d", i), ReadQueueNums: 2, WriteQueueNums: 2, Perm: permRead | permWrite}); err != nil {
			t.Fatal(err)
		}
	}
	got, version, all := tt.takeChanged()
	if all || len(got) != 3 || got["Changed0"] == nil || got["Changed2"].WriteQueueNums != 2 {
		t.Fatalf("after three puts: all=%v, %d topics %v", all, len(got), got)
	}
	if _, v := tt.snapshot(); v != version {
		t.Fatalf("version %+v, table at %+v", version, v)
	}
	if err := tt.remove("Changed1"); err != nil {
		t.Fatal(err)
	}
	if got, _, all := tt.takeChanged(); !all || len(got) != whole+2 {
		t.Fatalf("after a removal: all=%v, %d topics, want the whole table (%d)", all, len(got), whole+2)
	}
	tt.markAllChanged()
	if got, _, all := tt.takeChanged(); !all || len(got) != whole+2 {
		t.Fatalf("after markAllChanged: all=%v, %d topics", all, len(got))
	}
}

// TestTopicCreatedAfterStartIsRouted: topics created one by one after the broker
// registered its whole table reach the name server through the registrations of the
// changed topics only, the earlier topics keep their routes, and the whole-table
// figures in Stats still count the whole table.
func TestTopicCreatedAfterStartIsRouted(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 30 {
		if err := b.topics.put(wire.TopicConfig{TopicName: fmt.Sprintf("Early%02d", i), ReadQueueNums: 4, WriteQueueNums: 4, Perm: permRead | permWrite}); err != nil {
			t.Fatal(err)
		}
	}
	b.topics.takeChanged()
	b.registerAll(ctx)
	wholeBefore := b.Stats().LastRegisterTopics
	const n = 5 // fewer than half the table: registrations of the changed topics only
	for i := range n {
		if _, _, err := b.topics.getOrCreate(fmt.Sprintf("Later%02d", i), func() *wire.TopicConfig {
			return &wire.TopicConfig{TopicName: fmt.Sprintf("Later%02d", i), ReadQueueNums: 4, WriteQueueNums: 4, Perm: permRead | permWrite}
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		topic := fmt.Sprintf("Later%02d", i)
		testkit.WaitFor(t, 20*time.Second, func() bool {
			rd, err := wire.GetRouteInfo(ctx, c, b.NamesrvAddr(), topic)
			return err == nil && len(rd.QueueDatas) == 1 && rd.QueueDatas[0].WriteQueueNums == 4
		}, "route of", topic)
	}
	for _, topic := range []string{"Early00", "Early29", b.cfg.BrokerName} {
		if rd, err := wire.GetRouteInfo(ctx, c, b.NamesrvAddr(), topic); err != nil || len(rd.QueueDatas) != 1 {
			t.Fatalf("route of %s, registered before: %v", topic, err)
		}
	}
	if got := b.Stats().LastRegisterTopics; got != wholeBefore {
		t.Fatalf("LastRegisterTopics = %d after registrations of changed topics, want the whole table's %d", got, wholeBefore)
	}
	b.registerAll(ctx)
	if got := b.Stats().LastRegisterTopics; got != wholeBefore+n {
		t.Fatalf("LastRegisterTopics = %d after a whole registration, want %d", got, wholeBefore+n)
	}
}
