package broker

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// queryMessage sends QUERY_MESSAGE (12) with the given ext fields.
func queryMessage(t *testing.T, c *remoting.Client, addr string, ext map[string]string) *remoting.RemotingCommand {
	t.Helper()
	return invoke(t, c, addr, remoting.NewRequest(remoting.QueryMessage, ext, nil))
}

func queryExt(topic, key string, maxNum int, begin, end int64) map[string]string {
	return map[string]string{"topic": topic, "key": key, "maxNum": strconv.Itoa(maxNum),
		"beginTimestamp": strconv.FormatInt(begin, 10), "endTimestamp": strconv.FormatInt(end, 10)}
}

// queryBodies decodes a successful QUERY_MESSAGE response and returns the bodies.
func queryBodies(t *testing.T, resp *remoting.RemotingCommand) []string {
	t.Helper()
	if resp.ResponseCode() != remoting.Success {
		t.Fatalf("QUERY_MESSAGE: code %d %q", resp.Code, resp.Remark)
	}
	ms, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
	if err != nil {
		t.Fatalf("QUERY_MESSAGE body: %v", err)
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Body)
	}
	return out
}

func TestQueryMessageAndViewByIDSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "QT", 2)
	start := time.Now().UnixMilli()
	offsetIDs := map[string]string{} // body -> offset msg id
	uniq := map[string]string{}      // body -> UNIQ_KEY
	for i := range 6 {
		body := fmt.Sprintf("order-body-%d", i)
		u := message.NewUniqID()
		resp := sendV1(t, c, b.Addr(), "QT", i%2, []byte(body), map[string]string{
			message.PropertyKeys: fmt.Sprintf("order-%d shared", i), message.PropertyTags: "TagQ",
			message.PropertyUniqClientMessageIDKeyIdx: u,
		})
		if resp.ResponseCode() != remoting.Success {
			t.Fatalf("send: %d %s", resp.Code, resp.Remark)
		}
		offsetIDs[body], uniq[body] = resp.ExtFields["msgId"], u
	}
	end := time.Now().UnixMilli()

	check := func(b *Broker, when string) {
		t.Helper()
		resp := queryMessage(t, c, b.Addr(), queryExt("QT", "order-4", 32, 0, math.MaxInt64))
		if got := queryBodies(t, resp); !slices.Equal(got, []string{"order-body-4"}) {
			t.Fatalf("%s: order-4: %v", when, got)
		}
		ts, err1 := strconv.ParseInt(resp.ExtFields["indexLastUpdateTimestamp"], 10, 64)
		phy, err2 := strconv.ParseInt(resp.ExtFields["indexLastUpdatePhyoffset"], 10, 64)
		if err1 != nil || err2 != nil || ts < start || phy <= 0 {
			t.Fatalf("%s: index ext %v", when, resp.ExtFields)
		}
		// maxNum 3: the newest three, oldest first.
		got := queryBodies(t, queryMessage(t, c, b.Addr(), queryExt("QT", "shared", 3, start, end)))
		if !slices.Equal(got, []string{"order-body-3", "order-body-4", "order-body-5"}) {
			t.Fatalf("%s: shared: %v", when, got)
		}
		// Unique-key query: maxNum is forced to 32 whatever the request says.
		ext := queryExt("QT", uniq["order-body-2"], 1, 0, math.MaxInt64)
		ext[uniqueKeyQueryFlag] = "true"
		if got := queryBodies(t, queryMessage(t, c, b.Addr(), ext)); !slices.Equal(got, []string{"order-body-2"}) {
			t.Fatalf("%s: by UNIQ_KEY: %v", when, got)
		}
		// Offset message id → VIEW_MESSAGE_BY_ID.
		host, off, err := message.ParseOffsetMsgID(offsetIDs["order-body-1"])
		if err != nil || host.String() != b.Addr() {
			t.Fatalf("%s: offset id %q: %v %v (broker %s)", when, offsetIDs["order-body-1"], host, err, b.Addr())
		}
		v := invoke(t, c, host.String(), remoting.NewRequest(remoting.ViewMessageByID, map[string]string{"offset": strconv.FormatInt(off, 10)}, nil))
		ms, err := message.DecodeRecords(v.Body, message.DecodeOptions{CheckCRC: true})
		if v.ResponseCode() != remoting.Success || err != nil || len(ms) != 1 || string(ms[0].Body) != "order-body-1" ||
			ms[0].OffsetMsgID != offsetIDs["order-body-1"] || !slices.Contains(ms[0].Keys(), "order-1") {
			t.Fatalf("%s: view by id: code %d %v %v", when, v.Code, err, ms)
		}
	}
	check(b, "live")

	// Not found: a time range before the messages; the index ext fields are still there.
	resp := queryMessage(t, c, b.Addr(), queryExt("QT", "order-4", 32, 0, start-1))
	if resp.ResponseCode() != remoting.QueryNotFound || resp.Remark != "can not find message, maybe time range not correct" ||
		resp.ExtFields["indexLastUpdateTimestamp"] == "" || resp.ExtFields["indexLastUpdatePhyoffset"] == "" {
		t.Fatalf("time range before: %d %q %v", resp.Code, resp.Remark, resp.ExtFields)
	}
	if resp := queryMessage(t, c, b.Addr(), queryExt("QT", "no-such-key", 32, 0, math.MaxInt64)); resp.ResponseCode() != remoting.QueryNotFound {
		t.Fatalf("unknown key: %d %q", resp.Code, resp.Remark)
	}

	// Bad requests get an error naming the field; the connection keeps working.
	bad := []struct {
		ext  map[string]string
		want string
	}{
		{map[string]string{"topic": "QT", "maxNum": "1", "beginTimestamp": "0", "endTimestamp": "1"}, "key"},
		{queryExt("QT", "k", 0, 0, 1), "maxNum"},
		{queryExt("QT", "k", 1, 10, 9), "endTimestamp"},
		{queryExt("bad topic!", "k", 1, 0, 1), "topic"},
		{map[string]string{"topic": "QT", "key": "k", "maxNum": "x", "beginTimestamp": "0", "endTimestamp": "1"}, "maxNum"},
		{func() map[string]string { e := queryExt("QT", "k", 1, 0, 1); e[uniqueKeyQueryFlag] = "maybe"; return e }(), uniqueKeyQueryFlag},
	}
	for _, c2 := range bad {
		resp := queryMessage(t, c, b.Addr(), c2.ext)
		if resp.ResponseCode() != remoting.SystemError || !strings.Contains(resp.Remark, c2.want) {
			t.Errorf("ext %v: %d %q, want SYSTEM_ERROR naming %s", c2.ext, resp.Code, resp.Remark, c2.want)
		}
	}

	// Restart on the same address (so the offset ids still point here) and data dir.
	addr := b.Addr()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, func(cfg *Config) { cfg.ListenAddr = addr })
	check(b2, "after restart")
}
