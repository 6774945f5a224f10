package broker

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// Stored progress the store cannot back any more (a delay level's progress and a
// group's committed offset beyond the ends of their queues, as after losing the store's
// tail, and a hand-edited negative offset) is corrected at start, each correction logged once with the old and new value,
// and persisted: the next start logs nothing.
func TestStartCorrectionsAreLogged(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "T", 1)
	for range 3 {
		sendV1(t, c, b.Addr(), "T", 0, []byte("x"), nil)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "config", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("delayOffset.json", `{"offsetTable":{"2":50}}`)
	write("consumerOffset.json", `{"offsetTable":{"T@g":{"0":99},"T@n":{"0":-5}}}`)

	logs, log := testkit.CaptureLogs(t)
	b2 := startBroker(t, dir, func(c *Config) { c.Logger = log })
	delay := logs.Find("corrected at start: delay level progress")
	if len(delay) != 1 || delay[0].Attrs["level"] != "2" || delay[0].Attrs["old"] != "50" || delay[0].Attrs["new"] != "0" {
		t.Fatalf("delay progress correction logged as %v", delay)
	}
	off := logs.Find("corrected at start: consumer offset beyond")
	if len(off) != 1 || off[0].Attrs["group"] != "g" || off[0].Attrs["topic"] != "T" || off[0].Attrs["old"] != "99" || off[0].Attrs["new"] != "3" {
		t.Fatalf("offset correction logged as %v", off)
	}
	if got, _ := b2.offsets.query("g", "T", 0); got != 3 {
		t.Fatalf("offset after correction %d, want 3", got)
	}
	neg := logs.Find("corrected at start: consumer offset negative")
	if len(neg) != 1 || neg[0].Attrs["group"] != "n" || neg[0].Attrs["old"] != "-5" || neg[0].Attrs["new"] != "0" {
		t.Fatalf("negative offset correction logged as %v", neg)
	}
	if got, _ := b2.offsets.query("n", "T", 0); got != 0 {
		t.Fatalf("negative offset after correction %d, want 0 (the queue's first entry)", got)
	}
	if err := b2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	startBroker(t, dir, func(c *Config) { c.Logger = log })
	if got := logs.Find("corrected"); len(got) != 0 {
		t.Fatalf("second start corrected again: %v", got)
	}
}

// TestStartCorrectsNegativeOffsetsEverywhere: a negative committed offset goes to its
// queue's first entry also when retention moved that entry past 0, and to 0 for a
// retry topic, a topic that no longer exists and a queue the topic does not have; the
// corrections are persisted (the next start logs none), and an offset in range is left
// alone.
func TestStartCorrectsNegativeOffsetsEverywhere(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *Config) {
		c.MaxMessageSize = 16 << 10
		c.MappedFileSizeCommitLog = 96 << 10
	}
	b := startBroker(t, dir, mod)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "T", 1)
	body := make([]byte, 8<<10)
	for range 36 {
		if r := sendV1(t, c, b.Addr(), "T", 0, body, nil); r.ResponseCode() != remoting.Success {
			t.Fatal(r.Remark)
		}
	}
	b.offsets.commit("g", "T", 0, 36)
	if n := b.cleanOnce(time.Now(), 99); n == 0 {
		t.Fatal("retention deleted nothing")
	}
	lo := b.store.MinOffset("T", 0)
	if lo == 0 {
		t.Fatal("the queue's first entry is still 0 after retention")
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "config", "consumerOffset.json")
	if err := os.WriteFile(file, []byte(`{"offsetTable":{"T@g":{"0":36},"T@n":{"0":-1},"%RETRY%n@n":{"0":-2},`+
		`"Gone@n":{"0":-7},"T@m":{"5":-3}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	logs, log := testkit.CaptureLogs(t)
	b2 := startBroker(t, dir, func(c *Config) { mod(c); c.Logger = log })
	want := []struct {
		group, topic string
		q            int32
		off          int64
	}{{"g", "T", 0, 36}, {"n", "T", 0, lo}, {"n", "%RETRY%n", 0, 0}, {"n", "Gone", 0, 0}, {"m", "T", 5, 0}}
	for _, w := range want {
		if got, ok := b2.offsets.query(w.group, w.topic, w.q); !ok || got != w.off {
			t.Errorf("offset of %s on %s/%d after start: %d (%v), want %d", w.group, w.topic, w.q, got, ok, w.off)
		}
	}
	if n := len(logs.Find("corrected at start: consumer offset negative")); n != 4 {
		t.Fatalf("%d negative offsets corrected, want 4", n)
	}
	if err := b2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	startBroker(t, dir, func(c *Config) { mod(c); c.Logger = log })
	if got := logs.Find("corrected at start"); len(got) != 0 {
		t.Fatalf("the second start corrected again: %v", got)
	}
}

// TestNoNegativeOffsetAtRunTime: nothing a client sends stores a negative committed
// offset — UPDATE_CONSUMER_OFFSET with one is refused naming the field, a pull's
// commitOffset below 0 is not stored — so only a hand-edited file needs the start
// correction.
func TestNoNegativeOffsetAtRunTime(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "T", 1)
	sendV1(t, c, b.Addr(), "T", 0, []byte("x"), nil)
	r := invoke(t, c, b.Addr(), remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{
		"consumerGroup": "g", "topic": "T", "queueId": "0", "commitOffset": "-1"}, nil))
	if r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "commitOffset") {
		t.Fatalf("UPDATE_CONSUMER_OFFSET -1: %d %q, want SYSTEM_ERROR naming commitOffset", r.Code, r.Remark)
	}
	ext := map[string]string{
		"consumerGroup": "g", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
		"sysFlag": strconv.Itoa(wire.PullFlagSubscription | wire.PullFlagCommitOffset), "commitOffset": "-5",
		"suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0", "expressionType": "TAG",
	}
	if r := invoke(t, c, b.Addr(), remoting.NewRequest(remoting.PullMessage, ext, nil)); r.ResponseCode() != remoting.Success {
		t.Fatalf("pull: %d %s", r.Code, r.Remark)
	}
	if off, ok := b.offsets.query("g", "T", 0); ok {
		t.Fatalf("a negative offset was stored at run time: %d", off)
	}
}
