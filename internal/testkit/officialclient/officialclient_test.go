package officialclient

import (
	"testing"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// TestRebalanceMutexFound keeps ShutdownConsumer honest: with the pinned client
// version the reflection must find rbMutex, or the workaround is silently off. When a
// client upgrade renames the fields, check whether the race is fixed upstream and
// either drop the workaround or follow the new names.
func TestRebalanceMutexFound(t *testing.T) {
	c, err := rocketmq.NewPushConsumer(
		rmqconsumer.WithNameServer(primitive.NamesrvAddr{"127.0.0.1:9"}),
		rmqconsumer.WithGroupName("officialclient_probe"),
		rmqconsumer.WithInstance("officialclient_probe"),
	)
	if err != nil {
		t.Fatal(err)
	}
	if RebalanceMutex(c) == nil {
		t.Fatal("rmqClient.rbMutex not found in the official push consumer: the shutdown race workaround is off")
	}
	if RebalanceMutex(nil) != nil {
		t.Fatal("RebalanceMutex(nil) found a mutex")
	}
}
