package peers_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
)

// One Apache RocketMQ serves the whole package (a JVM start is slow): started on first
// use, stopped by TestMain.
var shared struct {
	once sync.Once
	r    *peers.RocketMQ
	err  error
}

// delayLevels makes every delay level 1 s on both brokers (Apache RocketMQ's shortest
// unit), so consume retries and delayed messages come back quickly.
var delayLevels = strings.TrimSpace(strings.Repeat("1s ", 18))

// testBrokerConf is the Apache broker's configuration in these tests; sluiceConfig
// mirrors it for the Sluice broker.
var testBrokerConf = map[string]string{
	"messageDelayLevel":        delayLevels,
	"transactionCheckInterval": "1000",
	"transactionTimeOut":       "1000",
	"flushDiskType":            "ASYNC_FLUSH",
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.r != nil {
		if err := shared.r.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop apache rocketmq:", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// apacheRocketMQ returns the package's Apache RocketMQ, starting it on first use; it
// skips t without Java or the jars.
func apacheRocketMQ(t *testing.T) *peers.RocketMQ {
	t.Helper()
	shared.once.Do(func() {
		shared.r, shared.err = peers.LaunchRocketMQ(context.Background(), peers.RocketMQOptions{BrokerConf: testBrokerConf})
	})
	if shared.err != nil {
		if err := peers.Available("rocketmq"); err != nil {
			t.Skipf("apache rocketmq: %v", err)
		}
		t.Fatalf("apache rocketmq: %v", shared.err)
	}
	return shared.r
}

// sluiceBroker starts a Sluice broker (embedded name server) configured like the Apache
// one, stopped at t.Cleanup.
func sluiceBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{
		MessageDelayLevel:        delayLevels,
		TransactionCheckInterval: 1000,
		TransactionTimeOut:       1000,
		EnablePropertyFilter:     true,
	})
	return b
}
