package broker

import (
	"context"
	"os"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
)

func TestStartEphemeral(t *testing.T) {
	b, stop, err := StartEphemeral(Config{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	dir := b.DataDir()
	if _, err := os.Stat(dir); err != nil || b.Addr() == "" || b.NamesrvAddr() == "" {
		t.Fatalf("dir %q (%v), addr %q, namesrv %q", dir, err, b.Addr(), b.NamesrvAddr())
	}
	c := newClient(t)
	createTopic(t, c, b.Addr(), "E", 1)
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("temporary dir left behind: %v", err)
	}
	if _, _, err := StartEphemeral(Config{BrokerRole: "SLAVE"}); err == nil {
		t.Fatal("an invalid config started")
	}
}
