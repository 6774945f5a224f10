package main

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

// TestMessageFindAndGet sends a message whose key is the seed's content key,
// "<tag>_<md5hex(body)>" (middleware.ContentKey), to an embedded broker and finds it with
// `admin message find --key` and `admin message get --id`.
func TestMessageFindAndGet(t *testing.T) {
	quiet := testkit.Quiet()
	b, _ := testbroker.Start(t, broker.Config{MappedFileSizeCommitLog: 8 << 20})
	ns := b.NamesrvAddr()
	if out, err := run(t, "admin", "topic", "create", "--namesrv", ns, "--topic", "Payments", "--queues", "2"); err != nil {
		t.Fatalf("topic create: %v %s", err, out)
	}

	body := []byte(`{"payment":"p-42","amount":"10.00"}`)
	sum := md5.Sum(body)
	key := "Paid_" + hex.EncodeToString(sum[:])
	uniq := message.NewUniqID()
	c, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ext := map[string]string{
		"producerGroup": "pg", "topic": "Payments", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": "1", "sysFlag": "0", "bornTimestamp": strconv.FormatInt(time.Now().UnixMilli(), 10), "flag": "0",
		"properties": message.MarshalProperties(map[string]string{message.PropertyTags: "Paid", message.PropertyKeys: key,
			message.PropertyUniqClientMessageIDKeyIdx: uniq}),
		"reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "0", "batch": "false",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.InvokeSync(ctx, b.Addr(), remoting.NewRequest(remoting.SendMessage, ext, body))
	if err != nil || resp.ResponseCode() != remoting.Success {
		t.Fatalf("send: %v %v", err, resp)
	}
	offsetID := resp.ExtFields["msgId"]

	// find: a table row with the ids, then the count.
	out, err := run(t, "admin", "message", "find", "--namesrv", ns, "--topic", "Payments", "--key", key)
	if err != nil {
		t.Fatalf("find: %v\n%s", err, out)
	}
	for _, want := range []string{"OFFSET_MSG_ID", offsetID, uniq, "Paid", key, b.Name(), "found 1 message(s) of topic Payments with key " + key} {
		if !strings.Contains(out, want) {
			t.Errorf("find output lacks %q:\n%s", want, out)
		}
	}
	// find --json with a time range around now.
	now := time.Now().UTC()
	out, err = run(t, "admin", "message", "find", "--namesrv", ns, "--topic", "Payments", "--key", key, "--json",
		"--begin", now.Add(-time.Minute).Format(time.RFC3339), "--end", now.Add(time.Minute).Format(time.RFC3339))
	if err != nil {
		t.Fatalf("find --json: %v\n%s", err, out)
	}
	var found foundJSON
	if err := json.Unmarshal([]byte(out), &found); err != nil || len(found.Messages) != 1 || found.Partial || found.FailedBrokers == nil ||
		found.Topic != "Payments" || found.Key != key {
		t.Fatalf("find --json output (%v):\n%s", err, out)
	}
	views := found.Messages
	if v := views[0]; v.OffsetMsgID != offsetID || v.MsgID != uniq || v.Body != string(body) || v.BodyEncoding != "utf8" ||
		v.QueueID != 1 || v.Tags != "Paid" || len(v.Keys) != 1 || v.Keys[0] != key || v.Broker != b.Name() {
		t.Errorf("find --json: %+v", v)
	}
	// A range in the past finds nothing (and is not an error).
	out, err = run(t, "admin", "message", "find", "--namesrv", ns, "--topic", "Payments", "--key", key,
		"--begin", "2020-01-01T00:00:00Z", "--end", "2020-01-02T00:00:00Z")
	if err != nil || !strings.Contains(out, "found 0 message(s)") {
		t.Errorf("find in 2020: %v\n%s", err, out)
	}

	// get --id with the offset message id: every field and the body.
	out, err = run(t, "admin", "message", "get", "--namesrv", ns, "--id", offsetID)
	if err != nil {
		t.Fatalf("get: %v\n%s", err, out)
	}
	for _, want := range []string{"OffsetMsgID:", offsetID, "MsgID:", uniq, "Topic:", "Payments", "Keys:", key, "Tags:", "Paid",
		"StoreHost:", b.Addr(), "Body (35 bytes, utf8):", string(body)} {
		if !strings.Contains(out, want) {
			t.Errorf("get output lacks %q:\n%s", want, out)
		}
	}
	// get --id with the client message id needs --topic.
	if _, err := run(t, "admin", "message", "get", "--namesrv", ns, "--id", uniq); err == nil || !strings.Contains(err.Error(), "--topic") {
		t.Errorf("get by client id without --topic: %v", err)
	}
	out, err = run(t, "admin", "message", "get", "--namesrv", ns, "--id", uniq, "--topic", "Payments", "--json")
	found = foundJSON{}
	if err != nil || json.Unmarshal([]byte(out), &found) != nil || len(found.Messages) != 1 || found.Messages[0].OffsetMsgID != offsetID || found.Partial {
		t.Errorf("get by client id with --topic: %v\n%s", err, out)
	}

	// Bad input: clear errors naming the flag.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "message", "find", "--namesrv", ns, "--topic", "Payments", "--key", key, "--begin", "yesterday"}, "--begin"},
		{[]string{"admin", "message", "find", "--namesrv", ns, "--topic", "Payments"}, "key"},
		{[]string{"admin", "message", "find", "--namesrv", ns, "--topic", "Payments", "--key", "a b"}, "key"},
		{[]string{"admin", "message", "get", "--namesrv", ns, "--id", "XYZ"}, "msgId"},
		{[]string{"admin", "message", "get", "--namesrv", ns}, "id"},
	} {
		if _, err := run(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want one naming %s", c.args[2:], err, c.want)
		}
	}
}

// TestSeedKeysFindableAfterRestart sends with the real producer and the seed's Keys
// middleware (key "<tag>_<md5hex(body)>"), restarts the broker on the same address and
// data directory, and finds every message by its key and by its offset message id.
func TestSeedKeysFindableAfterRestart(t *testing.T) {
	quiet := testkit.Quiet()
	dir := t.TempDir()
	start := func(listen string) *broker.Broker {
		b, err := broker.New(broker.Config{ListenAddr: listen, NamesrvListenAddr: "127.0.0.1:0",
			StorePathRootDir: dir, MappedFileSizeCommitLog: 8 << 20, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
		return b
	}
	b := start("127.0.0.1:0")
	if out, err := run(t, "admin", "topic", "create", "--namesrv", b.NamesrvAddr(), "--topic", "Refunds", "--queues", "2"); err != nil {
		t.Fatalf("topic create: %v %s", err, out)
	}
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Logger: quiet,
		Middlewares: []middleware.SendMiddleware{middleware.Keys()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type sent struct {
		key, offsetID, body string
	}
	var all []sent
	for i, body := range []string{"refund r-1 of 10.00", "refund r-2 of 99.99", strings.Repeat("a large refund batch line\n", 300)} {
		msg := message.NewMessage("Refunds", []byte(body)).SetTag([]string{"Refunded", "Partial", "Bulk"}[i])
		res, err := p.SendSync(ctx, msg)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		all = append(all, sent{key: middleware.ContentKey(msg), offsetID: res.OffsetMsgID, body: body})
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	addr := b.Addr()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	b = start(addr)
	ns := b.NamesrvAddr()
	var out string
	testkit.WaitFor(t, 20*time.Second, func() bool {
		out, err = run(t, "admin", "topic", "route", "--namesrv", ns, "--topic", "Refunds")
		return err == nil && strings.Contains(out, addr)
	}, "the route of Refunds after the restart: ", func() string { return fmt.Sprint(err, " ", out) })
	for _, s := range all {
		out, err := run(t, "admin", "message", "find", "--namesrv", ns, "--topic", "Refunds", "--key", s.key, "--json")
		var found foundJSON
		if err != nil || json.Unmarshal([]byte(out), &found) != nil || len(found.Messages) != 1 || found.Messages[0].OffsetMsgID != s.offsetID || found.Messages[0].Body != s.body {
			t.Fatalf("find %s after restart: %v\n%s", s.key, err, out)
		}
		out, err = run(t, "admin", "message", "get", "--namesrv", ns, "--id", s.offsetID, "--json")
		found = foundJSON{}
		if err != nil || json.Unmarshal([]byte(out), &found) != nil || len(found.Messages) != 1 || found.Messages[0].Body != s.body || found.Messages[0].Keys[0] != s.key {
			t.Fatalf("get %s after restart: %v\n%s", s.offsetID, err, out)
		}
	}
}
