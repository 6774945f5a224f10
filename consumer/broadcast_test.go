package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// Three broadcasting consumers of one group each receive every message; failures are
// not retried; offsets live in each consumer's local file. Restarted, each resumes from
// its file: only the messages sent while it was down arrive, and nothing it had already
// handled.
func TestBroadcastingEveryConsumerGetsAllAndResumesFromLocalOffsets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("Bcast", 4)
	p := e.producer()
	dir := t.TempDir()

	cols := make([]*collector, 3)
	start := func(i int) *PushConsumer {
		c := e.push(Config{Group: "bg", InstanceName: fmt.Sprintf("b%d", i), MessageModel: Broadcasting,
			ConsumeFromWhere: ConsumeFromFirstOffset, OffsetStoreDir: dir})
		handle := cols[i].handler(fmt.Sprintf("b%d", i))
		if err := c.Subscribe("Bcast", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			handle(ctx, msgs)
			if strings.HasSuffix(string(msgs[0].Body), "-7") {
				return message.ReconsumeLater, nil // not retried in broadcasting mode
			}
			return message.ConsumeSuccess, nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return c
	}
	cs := make([]*PushConsumer, 3)
	for i := range cs {
		cols[i] = newCollector()
		cs[i] = start(i)
	}
	first := send(t, p, "Bcast", 40, "one")
	for i, col := range cols {
		testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= 40 }, fmt.Sprintf("consumer %d: all 40", i))
		testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Bcast", first.ends, cs[i]) }, fmt.Sprintf("consumer %d: offsets at the queue ends", i))
	}
	// A second consumer of the same file in this process is refused.
	dup, err := NewPushConsumer(Config{NamesrvAddrs: e.namesrv, Group: "bg", InstanceName: "b0", MessageModel: Broadcasting, OffsetStoreDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := dup.Subscribe("Bcast", "*", ok); err != nil {
		t.Fatal(err)
	}
	if err := dup.Start(context.Background()); !errors.Is(err, ErrOffsetFileInUse) {
		t.Fatalf("second consumer of one offset file: %v", err)
	}
	_ = dup.Shutdown(context.Background())

	for i, c := range cs {
		shutdown(t, c)
		col := cols[i]
		col.mu.Lock()
		if col.count != 40 || len(col.got) != 40 {
			t.Fatalf("consumer %d: %d deliveries of %d messages, want each of 40 once", i, col.count, len(col.got))
		}
		col.mu.Unlock()
		// The file holds the queue ends.
		var f offsetFile
		b, err := os.ReadFile(filepath.Join(dir, "bg", fmt.Sprintf("b%d", i), "offsets.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		for _, en := range f.OffsetTable {
			mq := message.MessageQueue{Topic: en.Topic, BrokerName: en.BrokerName, QueueID: en.QueueID}
			if en.Offset != first.ends[mq] && first.ends[mq] != 0 {
				t.Fatalf("consumer %d: file offset of %v is %d, want %d", i, mq, en.Offset, first.ends[mq])
			}
		}
	}
	// The broker has no offsets for a broadcasting group.
	for q := 0; q < 4; q++ {
		if off := e.committed("bg", "Bcast", q); off != -1 {
			t.Fatalf("broker has offset %d for queue %d of a broadcasting group", off, q)
		}
	}

	second := send(t, p, "Bcast", 20, "two")
	for i := range cs {
		cols[i] = newCollector()
		cs[i] = start(i)
	}
	for i, col := range cols {
		testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= 20 }, fmt.Sprintf("consumer %d: the 20 new", i))
		testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Bcast", second.ends, cs[i]) }, fmt.Sprintf("consumer %d: offsets at the queue ends", i))
		col.mu.Lock()
		for body, n := range col.got {
			if !strings.HasPrefix(body, "two-") || n != 1 {
				t.Fatalf("restarted consumer %d got %q %d times", i, body, n)
			}
		}
		if col.count != 20 {
			t.Fatalf("restarted consumer %d got %d messages, want the 20 new ones", i, col.count)
		}
		col.mu.Unlock()
	}
}

func TestLocalOffsetsFile(t *testing.T) {
	dir := t.TempDir()
	path, err := offsetFilePath(dir, "g", "")
	if err != nil || path != filepath.Join(dir, "g", "DEFAULT", "offsets.json") {
		t.Fatalf("path %q %v", path, err)
	}
	l, err := openLocalOffsets(path)
	if err != nil {
		t.Fatal(err)
	}
	mq := message.MessageQueue{Topic: "T", BrokerName: "b", QueueID: 2}
	if off, _ := l.read(context.Background(), mq); off != -1 {
		t.Fatalf("empty store read %d", off)
	}
	if _, err := openLocalOffsets(path); !errors.Is(err, ErrOffsetFileInUse) {
		t.Fatalf("second open: %v", err)
	}
	_ = l.update(context.Background(), mq, 42)
	if err := l.flush(); err != nil {
		t.Fatal(err)
	}
	l.close()
	l2, err := openLocalOffsets(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.close()
	if off, _ := l2.read(context.Background(), mq); off != 42 {
		t.Fatalf("reloaded %d", off)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	// A corrupt file is an error naming it, not an empty table.
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openLocalOffsets(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("corrupt file: %v", err)
	}
	if _, err := openLocalOffsets(bad); err == nil || errors.Is(err, ErrOffsetFileInUse) {
		t.Fatalf("a failed open must not keep the file claimed: %v", err)
	}
}
