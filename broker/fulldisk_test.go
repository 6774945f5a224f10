package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestStartOnFullDisk: a broker started on a full disk used to refuse to start. It now
// starts, serves the messages it has, stores sends in space it already holds, and
// refuses the rest with a clear error.
func TestStartOnFullDisk(t *testing.T) {
	b, dir, store, mod := startSmallDiskBroker(t)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Full", 1)
	for range 3 {
		if r := sendV1(t, c, b.Addr(), "Full", 0, []byte("before"), nil); r.ResponseCode() != remoting.Success {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.FillDisk(t, dir)
	cfg := Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0", StorePathRootDir: store, Logger: testkit.Quiet()}
	mod(&cfg)
	b2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.Start(); err != nil {
		t.Fatalf("start on a full disk: %v", err)
	}
	t.Cleanup(func() { _ = b2.Shutdown(context.Background()) })
	r := pull(t, c, b2.Addr(), "g", "Full", 0, 0, "*", 0)
	msgs, err := message.DecodeRecords(r.Body, message.DecodeOptions{})
	if r.ResponseCode() != remoting.Success || err != nil || len(msgs) != 3 {
		t.Fatalf("read on a full disk: %d %q %d %v", r.Code, r.Remark, len(msgs), err)
	}
	// The commitlog's prefaulter reserved the pages just after the first broker's writes
	// (store: prefaultAhead, 4 MiB): sends fill that space and are stored; the first send
	// that needs a new page is refused.
	const reserved, size = 4 << 20, 64 << 10
	body := []byte(strings.Repeat("after ", size/6))
	accepted := 0
	for {
		r = sendV1(t, c, b2.Addr(), "Full", 0, body, nil)
		if r.ResponseCode() != remoting.Success {
			break
		}
		if accepted++; accepted > reserved/size+1 {
			t.Fatalf("%d sends of %d bytes accepted on a full disk, beyond the %d bytes reserved ahead", accepted, size, reserved)
		}
	}
	if r.ResponseCode() != remoting.ServiceNotAvailable || !strings.Contains(r.Remark, "disk is full") {
		t.Fatalf("send on a full disk: code %d %q", r.Code, r.Remark)
	}
	t.Logf("%d sends of %d bytes stored in reserved space before the refusal", accepted, size)
	r = pull(t, c, b2.Addr(), "g", "Full", 0, 0, "*", 0)
	if msgs, err := message.DecodeRecords(r.Body, message.DecodeOptions{}); err != nil || len(msgs) < 3 {
		t.Fatalf("read after the refusal: %d messages, %v", len(msgs), err)
	}
	// Free space comes back: writes resume without a restart.
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	if r := sendV1(t, c, b2.Addr(), "Full", 0, []byte("after"), nil); r.ResponseCode() != remoting.Success {
		t.Fatalf("send after space was freed: %d %q", r.Code, r.Remark)
	}
}

// startSmallDiskBroker mounts a 48 MiB tmpfs at dir (it skips without root) and starts a
// broker with 8 MiB commitlog segments in its directory store; mod is that config
// change, for starting the broker again on the same store.
func startSmallDiskBroker(t *testing.T) (b *Broker, dir, store string, mod func(*Config)) {
	dir = testkit.MountTmpfs(t, "48m")
	store = filepath.Join(dir, "store")
	mod = func(c *Config) { c.MappedFileSizeCommitLog = 8 << 20 }
	return startBroker(t, store, mod), dir, store, mod
}
