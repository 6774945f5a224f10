package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/console"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/kafka"
	"github.com/sluicemq/sluice/lifecycle"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/outbox"
	"github.com/sluicemq/sluice/remoting"
	"github.com/sluicemq/sluice/retrytask"
)

func TestErrorMessage(t *testing.T) {
	for _, c := range []struct {
		e    *config.Error
		want string
	}{
		{&config.Error{Package: "admin", Field: "NamesrvAddrs", Reason: "at least one name server address is required"},
			"admin: config NamesrvAddrs: at least one name server address is required"},
		{&config.Error{Package: "broker", Field: "brokerRole", Value: "MASTER", Reason: "want ASYNC_MASTER, SYNC_MASTER or SLAVE"},
			`broker: config brokerRole="MASTER": want ASYNC_MASTER, SYNC_MASTER or SLAVE`},
		{&config.Error{Package: "store", Field: "ConsumeQueueEntries", Value: -1, Reason: "want 1..1000000 entries"},
			"store: config ConsumeQueueEntries=-1: want 1..1000000 entries"},
		{&config.Error{Field: "Timeout", Value: -time.Second, Reason: "must not be negative"},
			"config Timeout=-1s: must not be negative"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
	var ce *config.Error
	if err := fmt.Errorf("start: %w", &config.Error{Field: "F", Reason: "r"}); !errors.As(err, &ce) || ce.Field != "F" {
		t.Fatalf("errors.As through a wrap: %v", err)
	}
}

// TestEveryPackageReturnsIt: a bad configuration of each package that validates one is
// the same *config.Error, naming the package and the field.
func TestEveryPackageReturnsIt(t *testing.T) {
	for _, c := range []struct {
		err          error
		pkg, field   string
		reasonSubstr string
	}{
		{func() error { _, err := admin.New(admin.Config{}); return err }(), "admin", "NamesrvAddrs", "at least one"},
		{func() error {
			_, err := admin.New(admin.Config{NamesrvAddrs: []string{"127.0.0.1:9876"}, Timeout: -1})
			return err
		}(), "admin", "Timeout", "negative"},
		{(&broker.Config{}).Validate(), "broker", "storePathRootDir", "required"},
		{(&store.Config{Dir: "x", ConsumeQueueEntries: -1}).Validate(), "store", "ConsumeQueueEntries", "entries"},
		{func() error { _, err := kafka.NewProducer(kafka.ProducerConfig{}); return err }(), "kafka", "Brokers", "at least one"},
		{(&kafka.Config{Brokers: []string{"127.0.0.1:9092"}}).Validate(), "kafka", "Group", "required"},
		{(&outbox.Config{}).Validate(), "outbox", "DB", ""},
		{(&inbox.Config{}).Validate(), "inbox", "DB", ""},
		{(&console.Config{}).Validate(), "console", "Admin", "required"},
		{(&remoting.ClientConfig{DialTimeout: -time.Second}).Validate(), "remoting", "DialTimeout", "negative"},
		{(&remoting.ServerConfig{MaxFrameSize: 1}).Validate(), "remoting", "MaxFrameSize", "at least 64 bytes"},
		{(&namesrv.Config{ListenAddr: "127.0.0.1:0", BrokerExpiry: -time.Second}).Validate(), "namesrv", "BrokerExpiry", "> 0"},
		{(&lifecycle.Config{Timeout: -time.Second}).Validate(), "lifecycle", "Timeout", "negative"},
		{(&retrytask.Config{}).Validate(), "retrytask", "Client", "Redis client"},
		{(&redismw.DedupConfig{}).Validate(), "middleware", "Client", "nil"},
	} {
		var ce *config.Error
		if !errors.As(c.err, &ce) || ce.Package != c.pkg || ce.Field != c.field || !strings.Contains(ce.Reason, c.reasonSubstr) ||
			!strings.Contains(c.err.Error(), c.field) {
			t.Errorf("%s: %v (%#v), want a *config.Error naming %s", c.pkg, c.err, ce, c.field)
		}
	}
}
