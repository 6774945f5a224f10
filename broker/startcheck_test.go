package broker

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
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
