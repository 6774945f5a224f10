package main

import (
	"encoding/json"
	"net"
	"regexp"
	"slices"
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
// answer. Every command that asks several brokers prints what the live one answered (or
// did: dead letters listed, a topic or group deleted there), names the dead one in a
// line on stderr and in the error, and exits 5 — never a silent partial result and
// never exit 0. With -o json the document itself says "partial": true and names the
// dead broker in "failedBrokers"; stdout holds only the data.
func TestPartialClusterFailures(t *testing.T) {
	quiet := testkit.Quiet()
	cl := startAdminCluster(t)
	ns, b := cl.ns, cl.b
	adm := func(args ...string) (string, string, error) {
		t.Helper()
		return runIn(t, strings.NewReader(""), append(append([]string{}, cl.admin...), args...)...)
	}
	if out, _, err := adm("topic", "create", "--topic", "Orders,Doomed,Doomed2", "--queues", "1"); err != nil {
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
	var sent []*message.SendResult
	for i := range 3 {
		r, err := p.SendSync(c, message.NewMessage("Orders", []byte("o"+strconv.Itoa(i))).SetKeys("ord-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, r)
	}
	if err := p.Shutdown(c); err != nil {
		t.Fatal(err)
	}
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	call := func(code remoting.RequestCode, ext map[string]string) {
		t.Helper()
		resp, err := rc.InvokeSync(c, b.Addr(), remoting.NewRequest(code, ext, nil))
		if err != nil || resp.ResponseErr() != nil {
			t.Fatalf("request %d: %v %v", code, err, resp)
		}
	}
	for _, g := range []string{"billing", "points"} {
		call(remoting.UpdateConsumerOffset, map[string]string{"consumerGroup": g, "topic": "Orders", "queueId": "0", "commitOffset": "1"})
	}
	for _, r := range sent[:2] { // two dead letters of billing on the live broker
		_, phy, _ := message.ParseOffsetMsgID(r.OffsetMsgID)
		call(remoting.ConsumerSendMsgBack, map[string]string{"offset": strconv.FormatInt(phy, 10), "group": "billing", "delayLevel": "-1",
			"originMsgId": r.MsgID, "maxReconsumeTimes": "2"})
	}

	a, err := admin.New(admin.Config{NamesrvAddrs: []string{ns.Addr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	testkit.WaitFor(t, 20*time.Second, func() bool { // the key index is written behind the store
		ms, err := a.FindMessages(c, "Orders", "ord-1", time.Time{}, time.Time{})
		ms2, err2 := a.FindMessages(c, "Orders", "ord-2", time.Time{}, time.Time{})
		n, cerr := a.CountDLQ(c, "billing")
		return err == nil && len(ms) == 1 && err2 == nil && len(ms2) == 1 && cerr == nil && n.Total == 2
	}, "ord-1 and ord-2 in the key index and 2 dead letters of billing")

	// All healthy first: exit 0, every broker ok, and the JSON says it is whole.
	if out, _, err := adm("cluster"); err != nil || !regexp.MustCompile(`(?m)^DefaultCluster +`+b.Name()+` +master +`+regexp.QuoteMeta(b.Addr())+` +ok$`).MatchString(out) {
		t.Fatalf("cluster, all up: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"group", "list"}, {"dlq", "list", "--group", "billing"}} {
		out, stderr, err := adm(append(args, "-o", "json")...)
		var doc struct {
			Partial       *bool
			FailedBrokers []string
		}
		if err != nil || stderr != "" || json.Unmarshal([]byte(out), &doc) != nil || doc.Partial == nil || *doc.Partial || doc.FailedBrokers == nil || len(doc.FailedBrokers) != 0 {
			t.Errorf("%v -o json, all up: %v, stderr %q, want \"partial\": false, \"failedBrokers\": []\n%s", args, err, stderr, out)
		}
	}

	dead := registerDeadBroker(t, ns.Addr(), "Orders", "Doomed", "Doomed2", message.DLQTopic("billing"))
	named := "broker-dead (" + dead + ")"
	incomplete := regexp.MustCompile(`(?m)^INCOMPLETE: 1 of 2 broker\(s\) failed \(` + regexp.QuoteMeta(named) + `\); \S`)
	partial := func(what string, out, stderr string, err error, rows ...string) {
		t.Helper()
		if err == nil || exitCode(err) != exitPartial || !strings.Contains(err.Error(), "broker-dead") || !strings.Contains(err.Error(), dead) {
			t.Errorf("%s: err = %v (exit %d), want exit 5 naming broker-dead at %s", what, err, exitCodeOrZero(err), dead)
		}
		if !incomplete.MatchString(stderr) {
			t.Errorf("%s: stderr lacks the INCOMPLETE line naming %s:\n%s", what, named, stderr)
		}
		if strings.Contains(out, "INCOMPLETE") {
			t.Errorf("%s: the INCOMPLETE line is on stdout (it belongs on stderr):\n%s", what, out)
		}
		for _, re := range rows {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("%s: output lacks what the live broker answered or did (%s):\n%s", what, re, out)
			}
		}
	}
	// partialJSON checks a -o json document: exit 5, "partial": true, the dead broker
	// named in "failedBrokers", and the live broker's part (rows) in the document.
	partialJSON := func(what string, out, stderr string, err error, rows ...string) {
		t.Helper()
		partial(what, out, stderr, err, rows...)
		var doc struct {
			Partial       bool
			FailedBrokers []string
		}
		if jerr := json.Unmarshal([]byte(out), &doc); jerr != nil || !doc.Partial || strings.Join(doc.FailedBrokers, ",") != named {
			t.Errorf("%s: -o json lacks \"partial\": true, \"failedBrokers\": [%q] (%v):\n%s", what, named, jerr, out)
		}
	}
	out, stderr, err := adm("cluster")
	partial("cluster", out, stderr, err, `(?m)^DefaultCluster +broker-dead +master +`+regexp.QuoteMeta(dead)+` +UNREACHABLE: `,
		`(?m)^DefaultCluster +`+b.Name()+` +master +\S+ +ok$`)
	out, stderr, err = adm("cluster", "-o", "json")
	partialJSON("cluster -o json", out, stderr, err, `"brokerAddrTable"`, regexp.QuoteMeta(b.Addr()))
	out, stderr, err = adm("group", "list")
	partial("group list", out, stderr, err, `(?m)^billing +2 `)
	out, stderr, err = adm("group", "list", "-o", "json")
	partialJSON("group list -o json", out, stderr, err, `"group": "billing"`)
	out, stderr, err = adm("offset", "show", "--group", "billing", "--topic", "Orders")
	partial("offset show", out, stderr, err, `(?m)^`+b.Name()+` +0 +1 +0 +3 +2$`, `total lag 2`)
	out, stderr, err = adm("offset", "show", "--group", "billing", "--topic", "Orders", "-o", "json")
	partialJSON("offset show -o json", out, stderr, err, `"lag": 2`)
	out, stderr, err = adm("message", "find", "--topic", "Orders", "--key", "ord-1")
	partial("message find", out, stderr, err, `found 1 message\(s\) of topic Orders with key ord-1`)
	out, stderr, err = adm("message", "find", "--topic", "Orders", "--key", "ord-1", "-o", "json")
	partialJSON("message find -o json", out, stderr, err, `"msgId": "`+sent[1].MsgID+`"`)
	out, stderr, err = adm("message", "status", "--topic", "Orders", "--key", "ord-2")
	partial("message status", out, stderr, err, `(?m)^billing +not-consumed +no +1 `)
	out, stderr, err = adm("message", "status", "--topic", "Orders", "--key", "ord-2", "-o", "json")
	partialJSON("message status -o json", out, stderr, err, `"state": "not-consumed"`)
	out, stderr, err = adm("message", "get", "--topic", "Orders", "--id", sent[2].MsgID)
	partial("message get", out, stderr, err, `(?m)^OffsetMsgID: +`+sent[2].OffsetMsgID+`$`)
	out, stderr, err = adm("message", "get", "--topic", "Orders", "--id", sent[2].MsgID, "-o", "json")
	partialJSON("message get -o json", out, stderr, err, `"offsetMsgId": "`+sent[2].OffsetMsgID+`"`)
	out, stderr, err = adm("message", "status", "--topic", "Orders", "--id", sent[2].MsgID, "--group", "billing")
	partial("message status --id", out, stderr, err, `(?m)^billing +not-consumed +no +1 `)
	out, stderr, err = adm("group", "consistency", "--group", "billing")
	partial("group consistency", out, stderr, err, `group billing has no client online`)
	out, stderr, err = adm("group", "consistency", "--group", "billing", "-o", "json")
	partialJSON("group consistency -o json", out, stderr, err, `"group": "billing"`)
	out, stderr, err = adm("topic", "create", "--topic", "Refunds", "--queues", "1")
	partial("topic create", out, stderr, err, `created topic Refunds on `+b.Name())
	out, stderr, err = adm("topic", "create", "--topic", "Refunds2", "--queues", "1", "-o", "json")
	partialJSON("topic create -o json", out, stderr, err, `"topic": "Refunds2"`, `"Name": "`+b.Name()+`"`)

	// Dead letters: the live broker's two, listed and counted, with the dead one named.
	out, stderr, err = adm("dlq", "list", "--group", "billing")
	partial("dlq list", out, stderr, err, `group billing: 2 dead letter\(s\), 2 not re-driven yet`, regexp.QuoteMeta(sent[0].MsgID), regexp.QuoteMeta(sent[1].MsgID),
		`2 dead letter\(s\) shown: 1–2 of 2, newest first`)
	out, stderr, err = adm("dlq", "list", "--group", "billing", "-o", "json")
	partialJSON("dlq list -o json", out, stderr, err, `"total": 2`, regexp.QuoteMeta(sent[1].MsgID))
	out, stderr, err = adm("dlq", "resend", "--group", "billing", "-o", "json")
	partialJSON("dlq resend -o json", out, stderr, err, regexp.QuoteMeta(sent[0].MsgID), regexp.QuoteMeta(sent[1].MsgID), `"failed": \[\]`)

	out, stderr, err = adm("offset", "reset", "--group", "billing", "--topic", "Orders", "--time", "end", "--yes")
	partial("offset reset", out, stderr, err, `(?m)^  `+b.Name()+` queue 0 -> 3$`)
	out, stderr, err = adm("offset", "reset", "--group", "points", "--topic", "Orders", "--time", "end", "--yes", "-o", "json")
	partialJSON("offset reset -o json", out, stderr, err, `"offset": 3`)

	// Deletes: done on the live broker and said so; the dead one named; the route kept
	// (the dead broker still holds the topic).
	out, stderr, err = adm("topic", "delete", "--topic", "Doomed", "--yes")
	partial("topic delete", out, stderr, err, `(?m)^deleted topic Doomed from `+b.Name()+`$`)
	out, stderr, err = adm("topic", "delete", "--topic", "Doomed2", "--yes", "-o", "json")
	partialJSON("topic delete -o json", out, stderr, err, `"deletedFrom": \[\s*"`+b.Name()+`"\s*\]`, `"routeDeleted": false`)
	for _, tp := range []string{"Doomed", "Doomed2"} {
		if held, _ := a.TopicConfigs(c); strings.Contains(topicNamesOf(held), "|"+tp+"|") {
			t.Errorf("%s is still on the live broker after topic delete", tp)
		}
		if r, err := a.TopicRoute(c, tp); err != nil || len(r.BrokerDatas) == 0 {
			t.Errorf("route of %s after a partial delete: %v %v, want it kept (broker-dead holds the topic)", tp, r, err)
		}
	}
	out, stderr, err = adm("group", "delete", "--group", "billing", "--yes")
	partial("group delete", out, stderr, err, `(?m)^deleted consumer group billing \(config and offsets on `+b.Name()+`\)$`)
	out, stderr, err = adm("group", "delete", "--group", "points", "--yes", "-o", "json")
	partialJSON("group delete -o json", out, stderr, err, `"deletedFrom": \[\s*"`+b.Name()+`"\s*\]`)
	if gs, err := a.GroupSummaries(c); slices.ContainsFunc(gs, func(g admin.GroupSummary) bool { return g.Group == "billing" || g.Group == "points" }) {
		t.Errorf("billing or points still on the live broker after group delete (err %v): %+v", err, gs)
	}
	// A command that only reads the name server is not affected.
	if out, _, err := adm("topic", "list"); err != nil || !strings.Contains(out, "Orders") {
		t.Errorf("topic list: %v\n%s", err, out)
	}
}

// topicNamesOf returns "|a|b|" of ts.
func topicNamesOf(ts []admin.TopicInfo) string {
	s := "|"
	for _, t := range ts {
		s += t.Topic + "|"
	}
	return s
}
