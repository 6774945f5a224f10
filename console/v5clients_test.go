package console_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/grpcfront"
	"github.com/sluicemq/sluice/internal/testkit"
)

// TestV5ClientsShown: a SimpleConsumer of the official RocketMQ 5 Go client (v5.1.4) on
// the broker's gRPC front end is on the groups page (protocol grpc, one client online)
// and on its group's page with its client id, protocol, language, version, address
// and subscription.
func TestV5ClientsShown(t *testing.T) {
	e := newEnv(t, nil, broker.Config{})
	front, err := grpcfront.New(grpcfront.Config{Broker: e.b, Listen: "127.0.0.1:0", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := front.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, front.Shutdown)
	// The official client's process-wide settings: plain gRPC, logs in a temporary
	// directory.
	t.Setenv("rocketmq.client.logRoot", t.TempDir())
	t.Setenv("mq.consoleAppender.enabled", "false")
	rmq.ResetLogger()
	ssl := rmq.EnableSsl
	rmq.EnableSsl = false
	t.Cleanup(func() { rmq.EnableSsl = ssl })

	const topic, group = "V5Shown", "v5-shown"
	c, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: front.Addr(), ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.NewFilterExpression("TagV5")}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.GracefulStop() })

	row := regexp.MustCompile(`(?s)<tr[^>]*data-group="v5-shown">.*?</tr>`)
	var list string
	testkit.WaitFor(t, 20*time.Second, func() bool {
		_, body, _ := do(t, "GET", e.base+"/groups", nil, nil)
		list = row.FindString(body)
		return strings.Contains(list, `<td class="nowrap protocol">grpc</td>`)
	}, "the v5 group with protocol grpc on the groups page")
	if !strings.Contains(list, `<td class="r">1</td>`) || !strings.Contains(list, "pull clustering") || !strings.Contains(list, "online") {
		t.Errorf("groups page row: %s", list)
	}
	_, page, _ := do(t, "GET", e.base+"/groups/"+group, nil, nil)
	client := regexp.MustCompile(`(?s)<tr data-client="[^"]+">.*?</tr>`).FindString(page)
	for _, want := range []string{`<td class="protocol">grpc</td>`, `<td class="language">GO</td>`, `<td class="version">5.1.4</td>`,
		`<td class="addr">127.0.0.1:`, "pull CLUSTERING", "<strong>V5Shown</strong> <code>TagV5</code>"} {
		if !strings.Contains(client, want) {
			t.Errorf("group page client row lacks %q: %s", want, client)
		}
	}
	if !strings.Contains(page, "clients online (pull clustering) · grpc") {
		t.Errorf("group page summary lacks the protocol: %.2000s", page)
	}
}
