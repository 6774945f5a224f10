package main

import (
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

// registerDeadBroker registers broker-dead at an address nobody listens on, holding
// topics, with the name server at ns — as a name server still lists a broker that stopped
// until its registration expires. It returns the address.
func registerDeadBroker(t *testing.T, ns string, topics ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() }) // the registering connection stays open
	table := map[string]*wire.TopicConfig{}
	for _, tp := range topics {
		table[tp] = &wire.TopicConfig{TopicName: tp, ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6, TopicFilterType: "SINGLE_TAG"}
	}
	if _, err := wire.RegisterBroker(testkit.Context(t, 10*time.Second), rc, ns, wire.RegisterBrokerRequest{
		ClusterName: "DefaultCluster", BrokerName: "broker-dead", BrokerAddr: dead,
		Topics: wire.TopicConfigSerializeWrapper{TopicConfigTable: table, DataVersion: wire.DataVersion{Timestamp: 1, Counter: 1}}}); err != nil {
		t.Fatal(err)
	}
	return dead
}

// TestPartialClusterFailures: one real broker and one registered broker that does not
// answer. Every command that asks several brokers prints what the live one answered,
// names the dead one (in the output and the error) and exits 5 — never a silent partial
// result and never exit 0.
func TestPartialClusterFailures(t *testing.T) {
	quiet := testkit.Quiet()
	cl := startAdminCluster(t)
	ns, b := cl.ns, cl.b
	adm := func(args ...string) (string, error) { t.Helper(); return cl.adm(t, args...) }
	if out, err := adm("topic", "create", "--topic", "Orders", "--queues", "1"); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	c := testkit.Context(t, 60*time.Second)
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{ns.Addr()}, Group: "pf-pg", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(c); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := p.SendSync(c, message.NewMessage("Orders", []byte("o"+strconv.Itoa(i))).SetKeys("ord-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Shutdown(c); err != nil {
		t.Fatal(err)
	}
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	resp, err := rc.InvokeSync(c, b.Addr(), remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{
		"consumerGroup": "billing", "topic": "Orders", "queueId": "0", "commitOffset": "1"}, nil))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("commit: %v %v", err, resp)
	}

	// All healthy first: exit 0, every broker ok.
	if out, err := adm("cluster"); err != nil || !regexp.MustCompile(`(?m)^DefaultCluster +`+b.Name()+` +master +`+regexp.QuoteMeta(b.Addr())+` +ok$`).MatchString(out) {
		t.Fatalf("cluster, all up: %v\n%s", err, out)
	}

	a, err := admin.New(admin.Config{NamesrvAddrs: []string{ns.Addr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	testkit.WaitFor(t, 20*time.Second, func() bool { // the key index is written behind the store
		ms, err := a.FindMessages(c, "Orders", "ord-1", time.Time{}, time.Time{})
		return err == nil && len(ms) == 1
	}, "ord-1 in the key index")

	dead := registerDeadBroker(t, ns.Addr(), "Orders")
	named := "broker-dead (" + dead + ")"
	partial := func(what string, out string, err error, rows ...string) {
		t.Helper()
		if err == nil || exitCode(err) != exitPartial || !strings.Contains(err.Error(), "broker-dead") || !strings.Contains(err.Error(), dead) {
			t.Errorf("%s: err = %v (exit %d), want exit 5 naming broker-dead at %s", what, err, exitCodeOrZero(err), dead)
		}
		if !strings.Contains(out, "INCOMPLETE: 1 of 2 broker(s) did not answer ("+named+")") {
			t.Errorf("%s: output lacks the INCOMPLETE line naming %s:\n%s", what, named, out)
		}
		for _, re := range rows {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("%s: output lacks what the live broker answered (%s):\n%s", what, re, out)
			}
		}
	}
	out, err := adm("cluster")
	partial("cluster", out, err, `(?m)^DefaultCluster +broker-dead +master +`+regexp.QuoteMeta(dead)+` +UNREACHABLE: `,
		`(?m)^DefaultCluster +`+b.Name()+` +master +\S+ +ok$`)
	out, err = adm("group", "list")
	partial("group list", out, err, `(?m)^billing +2 `)
	out, err = adm("offset", "show", "--group", "billing", "--topic", "Orders")
	partial("offset show", out, err, `(?m)^`+b.Name()+` +0 +1 +0 +3 +2$`, `total lag 2`)
	out, err = adm("message", "find", "--topic", "Orders", "--key", "ord-1")
	partial("message find", out, err, `found 1 message\(s\) of topic Orders with key ord-1`)
	out, err = adm("message", "status", "--topic", "Orders", "--key", "ord-1")
	partial("message status", out, err, `(?m)^billing +not-consumed +no +1 `)
	out, err = adm("topic", "create", "--topic", "Refunds", "--queues", "1")
	partial("topic create", out, err, `created topic Refunds on `+b.Name())
	out, err = adm("offset", "reset", "--group", "billing", "--topic", "Orders", "--time", "end", "--yes")
	partial("offset reset", out, err, `(?m)^  `+b.Name()+` queue 0 -> 3$`)
	if out, err := adm("group", "list", "-o", "json"); exitCodeOrZero(err) != exitPartial || !strings.Contains(out, `"group": "billing"`) {
		t.Errorf("group list -o json: exit %d, %v\n%s", exitCodeOrZero(err), err, out)
	}
	// A command that only reads the name server is not affected.
	if out, err := adm("topic", "list"); err != nil || !strings.Contains(out, "Orders") {
		t.Errorf("topic list: %v\n%s", err, out)
	}
}
