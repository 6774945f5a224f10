package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/sluicemq/sluice/cmd/sluice/internal/bench"
	"github.com/sluicemq/sluice/internal/testkit"
)

var grpcLine = regexp.MustCompile(`sluice broker serving RocketMQ 5 gRPC clients on (\S+)`)

// TestGroupCommandsShowV5Clients: `sluice broker --grpc-listen` serves the official
// RocketMQ 5 Go client (v5.1.4); its SimpleConsumer's group is in `admin group list`
// (protocol grpc, one client, pull clustering), its client in `admin group clients`
// (id, protocol, language, version, address, subscription), and its progress (POP's
// committed offsets) in `admin offset show`.
func TestGroupCommandsShowV5Clients(t *testing.T) {
	dir := t.TempDir()
	bg := startBackground(t, "broker", "--data-dir", filepath.Join(dir, "store"), "--listen", "127.0.0.1:0",
		"--namesrv-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--log-level", "error")
	ns := bg.waitLine(t, brokerLine)[3]
	endpoint := bg.waitLine(t, grpcLine)[1]
	bench.SetupV5Client() // plain gRPC, client logs in a temporary directory

	const topic, group = "CliV5", "cli-v5"
	if out, err := run(t, "admin", "--namesrv", ns, "topic", "create", "--topic", topic, "--queues", "2"); err != nil {
		t.Fatalf("topic create: %v\n%s", err, out)
	}
	p, err := rmq.NewProducer(&rmq.Config{Endpoint: endpoint, Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.GracefulStop() })
	for _, body := range []string{"a", "b", "c"} {
		if _, err := p.Send(testkit.Context(t, 10*time.Second), &rmq.Message{Topic: topic, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: endpoint, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.GracefulStop() })
	got := 0
	testkit.WaitFor(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		mvs, err := c.Receive(ctx, 32, 20*time.Second)
		if rs, ok := rmq.AsErrRpcStatus(err); err != nil && !(ok && rs.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND)) {
			t.Fatalf("receive: %v", err)
		}
		for _, mv := range mvs {
			if err := c.Ack(ctx, mv); err != nil {
				t.Fatalf("ack: %v", err)
			}
			got++
		}
		return got >= 3
	}, "the simple consumer to receive and acknowledge 3 messages")

	out, err := run(t, "admin", "--namesrv", ns, "group", "list")
	if err != nil || !regexp.MustCompile(`(?m)^cli-v5 +0 +- +1 +pull clustering +grpc +online +`).MatchString(out) {
		t.Errorf("group list: %v\n%s", err, out)
	}
	var doc groupsJSON
	out, err = run(t, "admin", "--namesrv", ns, "group", "list", "-o", "json")
	if err == nil {
		err = json.Unmarshal([]byte(out), &doc)
	}
	groups := doc.Groups
	if err != nil || doc.Partial || len(groups) != 1 || strings.Join(groups[0].Protocols, ",") != "grpc" ||
		groups[0].ConsumeType != "CONSUME_ACTIVELY" || groups[0].Clients != 1 {
		t.Errorf("group list -o json: %v %+v\n%s", err, groups, out)
	}
	out, err = run(t, "admin", "--namesrv", ns, "group", "clients", "--group", group)
	if err != nil || !regexp.MustCompile(`(?m)^\S+ +grpc +GO +5\.1\.4 +127\.0\.0\.1:\d+ +pull clustering +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +CliV5 \*$`).MatchString(out) ||
		!strings.Contains(out, "1 client(s) of group cli-v5 online") {
		t.Errorf("group clients: %v\n%s", err, out)
	}
	var cdoc groupClientsJSON
	out, err = run(t, "admin", "--namesrv", ns, "group", "clients", "--group", group, "-o", "json")
	if err == nil {
		err = json.Unmarshal([]byte(out), &cdoc)
	}
	clients := cdoc.Clients
	if err != nil || cdoc.Partial || cdoc.Group != group || len(clients) != 1 || clients[0].Protocol != "grpc" ||
		clients[0].Version != "5.1.4" || clients[0].Language != "GO" || strings.Join(clients[0].Subscriptions, ",") != "CliV5 *" {
		t.Errorf("group clients -o json: %v %+v\n%s", err, clients, out)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		out, err = run(t, "admin", "--namesrv", ns, "offset", "show", "--group", group, "--topic", topic)
		return err == nil && strings.Contains(out, "total lag 0") && regexp.MustCompile(`(?m)^\S+ +\d +\d+ +0 +\d+ +0$`).MatchString(out)
	}, "offset show to show the v5 group's progress")
	if !regexp.MustCompile(`(?m)^\S+ +[01] +[1-3] `).MatchString(out) {
		t.Errorf("offset show: no committed offset from POP:\n%s", out)
	}
}
