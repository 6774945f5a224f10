package broker

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func pullSQL(t *testing.T, c *remoting.Client, addr, topic, expr string) *remoting.RemotingCommand {
	t.Helper()
	ext := map[string]string{"consumerGroup": "g", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
		"sysFlag": strconv.Itoa(wire.PullFlagSubscription), "commitOffset": "0", "suspendTimeoutMillis": "0",
		"subscription": expr, "subVersion": "0", "expressionType": "SQL92"}
	return invoke(t, c, addr, remoting.NewRequest(remoting.PullMessage, ext, nil))
}

func heartbeatSQL(t *testing.T, c *remoting.Client, addr, expr string) *remoting.RemotingCommand {
	t.Helper()
	hb := wire.HeartbeatData{ClientID: "sql-client", ConsumerDataSet: []wire.ConsumerData{{GroupName: "g", ConsumeType: "CONSUME_PASSIVELY",
		MessageModel: "CLUSTERING", SubscriptionDataSet: []wire.SubscriptionData{
			{Topic: "S", SubString: expr, SubVersion: 1, ExpressionType: "SQL92"},
			{Topic: "Other", SubString: "*", SubVersion: 1, ExpressionType: "TAG"}}}}}
	body, _ := json.Marshal(hb)
	return invoke(t, c, addr, remoting.NewRequest(remoting.HeartBeat, nil, body))
}

// TestSQL92Subscriptions: with enablePropertyFilter a SQL92 subscription (by heartbeat
// for push consumers, or in the pull request) gets exactly the matching messages; a
// malformed expression is refused with its position; with the filter off SQL92 is refused.
func TestSQL92Subscriptions(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.EnablePropertyFilter = true })
	c := newClient(t)
	createTopic(t, c, b.Addr(), "S", 1)
	for i := 1; i <= 10; i++ {
		props := map[string]string{"a": strconv.Itoa(i), "TAGS": "t" + strconv.Itoa(i%2)}
		if i%3 == 0 {
			props["region"] = "eu"
		}
		sendV1(t, c, b.Addr(), "S", 0, []byte("m"+strconv.Itoa(i)), props)
	}
	check := func(r *remoting.RemotingCommand, want string) {
		t.Helper()
		ms, _ := message.DecodeRecords(r.Body, message.DecodeOptions{})
		var got []string
		for _, m := range ms {
			got = append(got, string(m.Body))
		}
		if strings.Join(got, ",") != want {
			t.Fatalf("code %d %q: got %v want %s", r.Code, r.Remark, got, want)
		}
	}
	check(pullSQL(t, c, b.Addr(), "S", "a > 5 AND region = 'eu'"), "m6,m9")
	check(pullSQL(t, c, b.Addr(), "S", "region IS NULL AND TAGS IN ('t0') AND a BETWEEN 1 AND 5"), "m2,m4")
	check(pullSQL(t, c, b.Addr(), "S", "region <> 'eu'"), "") // missing region is not "<> eu"
	if r := pullSQL(t, c, b.Addr(), "S", "a > "); r.ResponseCode() != remoting.SubscriptionParseFailed || !strings.Contains(r.Remark, "byte") {
		t.Fatalf("malformed pull expression: %d %q", r.Code, r.Remark)
	}

	// Push consumers subscribe by heartbeat.
	if r := heartbeatSQL(t, c, b.Addr(), "a >= 9"); r.ResponseCode() != remoting.Success {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}
	noSub := map[string]string{"consumerGroup": "g", "topic": "S", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
		"sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}
	check(invoke(t, c, b.Addr(), remoting.NewRequest(remoting.PullMessage, noSub, nil)), "m9,m10") // the heartbeat's filter
	bad := heartbeatSQL(t, c, b.Addr(), "a >= 9 AND")
	if bad.ResponseCode() != remoting.SubscriptionParseFailed || !strings.Contains(bad.Remark, "a >= 9 AND") {
		t.Fatalf("malformed heartbeat expression: %d %q", bad.Code, bad.Remark)
	}
	if b.clients.subscription("g", "Other") == nil {
		t.Fatal("the valid subscriptions of a heartbeat with a refused one must still register")
	}

	off := startBroker(t, t.TempDir(), nil)
	createTopic(t, c, off.Addr(), "S", 1)
	if r := pullSQL(t, c, off.Addr(), "S", "a > 1"); r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "enablePropertyFilter") {
		t.Fatalf("SQL92 with the filter off: %d %q", r.Code, r.Remark)
	}
	if r := heartbeatSQL(t, c, off.Addr(), "a > 1"); r.ResponseCode() != remoting.SystemError {
		t.Fatalf("SQL92 heartbeat with the filter off: %d", r.Code)
	}
}

// TestCheckClientConfig: CHECK_CLIENT_CONFIG (46), which the Java client sends at start
// for a SQL92 subscription, is SUCCESS for a good expression, SUBSCRIPTION_PARSE_FAILED
// for a malformed one, and SYSTEM_ERROR while enablePropertyFilter is off.
func TestCheckClientConfig(t *testing.T) {
	check := func(b *Broker, c *remoting.Client, typ, expr string) *remoting.RemotingCommand {
		body, _ := json.Marshal(map[string]any{"clientId": "java-client", "group": "g",
			"subscriptionData": wire.SubscriptionData{Topic: "S", SubString: expr, ExpressionType: typ}})
		return invoke(t, c, b.Addr(), remoting.NewRequest(remoting.CheckClientConfig, nil, body))
	}
	on := startBroker(t, t.TempDir(), func(c *Config) { c.EnablePropertyFilter = true })
	c := newClient(t)
	for _, tc := range []struct {
		typ, expr string
		want      remoting.ResponseCode
	}{
		{"SQL92", "a > 5 AND region = 'eu'", remoting.Success},
		{"SQL92", "a > ", remoting.SubscriptionParseFailed},
		{"TAG", "x || y", remoting.Success},
	} {
		if r := check(on, c, tc.typ, tc.expr); r.ResponseCode() != tc.want {
			t.Errorf("%s %q: code %d %q, want %d", tc.typ, tc.expr, r.Code, r.Remark, tc.want)
		}
	}
	off := startBroker(t, t.TempDir(), nil)
	if r := check(off, c, "SQL92", "a > 5"); r.ResponseCode() != remoting.SystemError {
		t.Errorf("SQL92 with the filter off: code %d %q, want SYSTEM_ERROR", r.Code, r.Remark)
	}
	if r := invoke(t, c, off.Addr(), remoting.NewRequest(remoting.CheckClientConfig, nil, []byte("{"))); r.ResponseCode() != remoting.SystemError {
		t.Errorf("bad body: code %d", r.Code)
	}
}
