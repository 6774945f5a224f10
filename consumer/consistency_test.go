package consumer

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Two clients of one group subscribe to different tags: the broker's view shows it
// (admin GroupConsistency), and each consumer logs a warning naming the other client.
func TestSubscriptionConsistencyReportedAndWarned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("Cons", 2)
	e.createTopic("Cons2", 1)
	logs := []*syncBuffer{{}, {}, {}}
	mk := func(i int, name string) *PushConsumer {
		return e.push(Config{Group: "csg", InstanceName: name,
			Logger: slog.New(slog.NewTextHandler(logs[i], &slog.HandlerOptions{Level: slog.LevelWarn}))})
	}
	a, b, c := mk(0, "ca"), mk(1, "cb"), mk(2, "cc")
	if err := a.Subscribe("Cons", "TagA || TagB", ok); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe("Cons", "TagB||TagA", ok); err != nil { // the same tags
		t.Fatal(err)
	}
	if err := c.Subscribe("Cons", "TagC", ok); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("Cons2", "*", ok); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*PushConsumer{a, b, c} {
		if err := x.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 20*time.Second, func() bool {
		return strings.Contains(logs[0].String(), c.ClientID()) && strings.Contains(logs[1].String(), c.ClientID()) &&
			strings.Contains(logs[2].String(), a.ClientID()) && strings.Contains(logs[2].String(), b.ClientID())
	}, "a and b warn about cc, cc about both")
	if strings.Contains(logs[0].String(), b.ClientID()) || strings.Contains(logs[1].String(), a.ClientID()) {
		t.Fatalf("a and b subscribe alike but warned about each other:\n%s\n%s", logs[0], logs[1])
	}
	for _, want := range []string{"subscribes differently", `topic Cons:`, "TagA || TagB", "TagC", "topic Cons2", "not subscribed"} {
		if !strings.Contains(logs[0].String(), want) {
			t.Fatalf("a's warning lacks %q:\n%s", want, logs[0])
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.admin.GroupConsistency(ctx, "csg")
	if err != nil {
		t.Fatal(err)
	}
	if r.Consistent || len(r.Sets) != 2 || len(r.Clients) != 3 {
		t.Fatalf("report %+v", r)
	}
	if got := strings.Join(r.Sets[0].Clients, ","); got != strings.Join(sortedIDs(a.ClientID(), b.ClientID()), ",") {
		t.Fatalf("largest set %v", r.Sets[0].Clients)
	}
	if len(r.Sets[1].Clients) != 1 || r.Sets[1].Clients[0] != c.ClientID() {
		t.Fatalf("second set %v", r.Sets[1].Clients)
	}
	if len(r.Differences) != 2 || r.Differences[0].ClientID != c.ClientID() {
		t.Fatalf("differences %+v", r.Differences)
	}

	// cc leaves: the group is consistent again.
	shutdown(t, c)
	testkit.WaitFor(t, 10*time.Second, func() bool {
		r, err := e.admin.GroupConsistency(ctx, "csg")
		return err == nil && r.Consistent && len(r.Clients) == 2
	}, "a consistent group")
	if r, err := e.admin.GroupConsistency(ctx, "nobody"); err != nil || !r.Consistent || len(r.Sets) != 0 {
		t.Fatalf("group without clients: %+v %v", r, err)
	}
}

func sortedIDs(ids ...string) []string {
	if len(ids) == 2 && ids[0] > ids[1] {
		ids[0], ids[1] = ids[1], ids[0]
	}
	return ids
}
