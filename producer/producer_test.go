package producer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
)

func TestMain(m *testing.M) {
	if os.Getenv(childBrokerEnv) != "" {
		runChildBroker() // this process is a broker for the failover test; never returns
	}
	goleak.VerifyTestMain(m)
}

var quiet = testkit.Quiet()

func ok(*remoting.RemotingCommand) *remoting.RemotingCommand {
	return remoting.NewResponse(remoting.Success, "")
}

// storeOK answers a send like a broker that stored it at queue offset 7.
func storeOK(code remoting.ResponseCode) func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
	return func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		r := remoting.NewResponse(code, "")
		r.SetExt("msgId", "7F00000100002A9F0000000000000010").SetExt("queueId", req.ExtFields["e"]).SetExt("queueOffset", "7").SetExt("MSG_REGION", "DefaultRegion")
		return r
	}
}

func refuse(code remoting.ResponseCode, remark string) func(*remoting.RemotingCommand) *remoting.RemotingCommand {
	return func(*remoting.RemotingCommand) *remoting.RemotingCommand { return remoting.NewResponse(code, remark) }
}

// brokerHandlers returns the handlers of a fake broker whose sends answer with send.
func brokerHandlers(send func(*remoting.RemotingCommand) *remoting.RemotingCommand) fakeremote.Handlers {
	return fakeremote.Handlers{remoting.SendMessageV2: send, remoting.HeartBeat: ok, remoting.UnregisterClient: ok}
}

// routeJSON builds a fastjson-style route (unquoted broker id keys) for brokers name→addr
// with queues queue counts each.
func routeJSON(queues int, brokers ...[2]string) string {
	var bd, qd []string
	for _, b := range brokers {
		bd = append(bd, fmt.Sprintf(`{"brokerAddrs":{0:%q},"brokerName":%q,"cluster":"C"}`, b[1], b[0]))
		qd = append(qd, fmt.Sprintf(`{"brokerName":%q,"perm":6,"readQueueNums":%d,"topicSynFlag":0,"writeQueueNums":%d}`, b[0], queues, queues))
	}
	return `{"brokerDatas":[` + strings.Join(bd, ",") + `],"queueDatas":[` + strings.Join(qd, ",") + `]}`
}

// newNamesrv answers GET_ROUTEINFO_BY_TOPIC from routes (topic → JSON); others get 17.
func newNamesrv(t *testing.T, routes map[string]string) *fakeremote.Server {
	return fakeremote.Start(t, fakeremote.Handlers{remoting.GetRouteInfoByTopic: func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		body, ok := routes[req.ExtFields["topic"]]
		if !ok {
			return remoting.NewResponse(remoting.TopicNotExist, "No topic route info in name server for the topic: "+req.ExtFields["topic"])
		}
		r := remoting.NewResponse(remoting.Success, "")
		r.Body = []byte(body)
		return r
	}})
}

func newProducer(t testing.TB, cfg Config) *Producer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func TestSendHeaderAndResult(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(4, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, Group: "pg"})

	msg := message.NewMessage("T", []byte("hello")).SetTag("TagA").SetKeys("k1", "k2")
	msg.Flag = 3
	r, err := p.SendSync(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	uniq := msg.UniqKey()
	if len(uniq) != 32 {
		t.Fatalf("UNIQ_KEY %q", uniq)
	}
	if r.Status != message.SendOK || r.MsgID != uniq || r.OffsetMsgID != "7F00000100002A9F0000000000000010" || r.QueueOffset != 7 ||
		r.Queue.Topic != "T" || r.Queue.BrokerName != "broker-a" || r.RegionID != "DefaultRegion" {
		t.Fatalf("result %+v", r)
	}
	reqs := b.Requests(remoting.SendMessageV2)
	if len(reqs) != 1 {
		t.Fatalf("%d sends", len(reqs))
	}
	ext := reqs[0].ExtFields
	for k, want := range map[string]string{"a": "pg", "b": "T", "c": "TBW102", "d": "4", "f": "0", "h": "3", "j": "0", "k": "false", "l": "0", "m": "false", "n": "broker-a"} {
		if ext[k] != want {
			t.Errorf("ext %s = %q, want %q", k, ext[k], want)
		}
	}
	if fmt.Sprint(r.Queue.QueueID) != ext["e"] {
		t.Errorf("queue id %d vs header %q", r.Queue.QueueID, ext["e"])
	}
	props := message.UnmarshalProperties(ext["i"])
	if props["TAGS"] != "TagA" || props["KEYS"] != "k1 k2" || props["UNIQ_KEY"] != uniq {
		t.Errorf("properties %q", ext["i"])
	}
	if string(reqs[0].Body) != "hello" {
		t.Errorf("body %q", reqs[0].Body)
	}
}

func TestSendRetriesOnAnotherBroker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault bool
		wantA int // first attempts on the refusing broker-a
	}{
		// Round-robin over 4 queues → half the first attempts hit broker-a, and each of
		// those was retried exactly once, on broker-b.
		{"fault tolerance off", false, 6},
		// broker-a answered SYSTEM_ERROR once and is avoided from then on.
		{"fault tolerance on", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := fakeremote.Start(t, brokerHandlers(refuse(remoting.SystemError, "disk full")))
			good := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
			ns := newNamesrv(t, map[string]string{"T": routeJSON(2, [2]string{"broker-a", bad.Addr()}, [2]string{"broker-b", good.Addr()})})
			p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, SendLatencyFaultEnable: &tc.fault})
			for i := 0; i < 12; i++ {
				r, err := p.SendSync(context.Background(), message.NewMessage("T", []byte("x")))
				if err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
				if r.Queue.BrokerName != "broker-b" {
					t.Fatalf("stored on %v", r.Queue)
				}
			}
			nBad, nGood := len(bad.Requests(remoting.SendMessageV2)), len(good.Requests(remoting.SendMessageV2))
			if nGood != 12 || nBad != tc.wantA {
				t.Fatalf("attempts: broker-a %d (want %d), broker-b %d (want 12)", nBad, tc.wantA, nGood)
			}
			avoided := p.AvoidedBrokers()
			if _, ok := avoided["broker-a"]; ok != tc.fault || len(avoided) > 1 {
				t.Fatalf("avoided brokers %v", avoided)
			}
		})
	}
}

func TestSendGivesUpAfterRetries(t *testing.T) {
	bad := fakeremote.Start(t, brokerHandlers(refuse(remoting.ServiceNotAvailable, "service not available now")))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(2, [2]string{"broker-a", bad.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	_, err := p.SendSync(context.Background(), message.NewMessage("T", []byte("x")))
	var se *SendError
	if !errors.As(err, &se) {
		t.Fatalf("want *SendError, got %v", err)
	}
	var re *remoting.ResponseError
	if se.Attempts != 3 || !errors.As(err, &re) || re.Code != remoting.ServiceNotAvailable || re.Remark != "service not available now" ||
		!re.Retryable() || !se.Retryable() || re.Request != remoting.SendMessageV2 || re.Broker != "broker-a" || re.Addr != bad.Addr() {
		t.Fatalf("send error %+v (answer %+v)", se, re)
	}
	if n := len(bad.Requests(remoting.SendMessageV2)); n != 3 {
		t.Fatalf("%d attempts, want 3 (1 + RetryTimesWhenSendFailed 2)", n)
	}

	// No retries configured.
	p2 := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, RetryTimesWhenSendFailed: -1})
	_, err = p2.SendSync(context.Background(), message.NewMessage("T", []byte("x")))
	if !errors.As(err, &se) || se.Attempts != 1 {
		t.Fatalf("no-retry producer: %v", err)
	}
}

func TestSendNeverRetriesMessageIllegal(t *testing.T) {
	a := fakeremote.Start(t, brokerHandlers(refuse(remoting.MessageIllegal, "the message is illegal, maybe msg body or properties length not matched")))
	b := fakeremote.Start(t, brokerHandlers(refuse(remoting.MessageIllegal, "the message is illegal")))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", a.Addr()}, [2]string{"broker-b", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	_, err := p.SendSync(context.Background(), message.NewMessage("T", []byte("x")))
	var se *SendError
	var re *remoting.ResponseError
	if !errors.As(err, &se) || !errors.As(err, &re) || re.Code != remoting.MessageIllegal || se.Attempts != 1 || se.Retryable() || re.Retryable() {
		t.Fatalf("got %v", err)
	}
	if n := len(a.Requests(remoting.SendMessageV2)) + len(b.Requests(remoting.SendMessageV2)); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

func TestSendTransportErrorsRetried(t *testing.T) {
	good := fakeremote.Start(t, brokerHandlers(storeOK(remoting.FlushDiskTimeout)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", deadAddr(t)}, [2]string{"broker-b", good.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	for i := 0; i < 4; i++ {
		r, err := p.SendSync(context.Background(), message.NewMessage("T", []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		// FLUSH_DISK_TIMEOUT (10) counts as stored, with its own status, and is not retried.
		if r.Status != message.SendFlushDiskTimeout || r.Queue.BrokerName != "broker-b" {
			t.Fatalf("result %+v", r)
		}
	}
	if n := len(good.Requests(remoting.SendMessageV2)); n != 4 {
		t.Fatalf("%d sends on broker-b, want 4", n)
	}

	// Only dead brokers: a *SendError wrapping the transport error.
	ns2 := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", deadAddr(t)})})
	p2 := newProducer(t, Config{NamesrvAddrs: []string{ns2.Addr()}})
	_, err := p2.SendSync(context.Background(), message.NewMessage("T", []byte("x")))
	var se *SendError
	var ce *remoting.ConnError
	var re *remoting.ResponseError
	if !errors.As(err, &se) || se.Attempts != 3 || errors.As(err, &re) || !errors.As(err, &ce) || !se.Retryable() {
		t.Fatalf("got %v", err)
	}
}

func TestSendValidationBeforeNetwork(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, MaxMessageSize: 1024})
	for name, tc := range map[string]struct {
		msg   *message.Message
		field string
	}{
		"empty body":    {message.NewMessage("T", nil), "body"},
		"too large":     {message.NewMessage("T", make([]byte, 1025)), "body"},
		"bad topic":     {message.NewMessage("a b", []byte("x")), "topic"},
		"bad tag":       {message.NewMessage("T", []byte("x")).SetTag("a||b"), "tag"},
		"system topic":  {message.NewMessage("SCHEDULE_TOPIC_XXXX", []byte("x")), "topic"},
		"nil message":   {nil, "message"},
		"long property": {message.NewMessage("T", []byte("x")).SetProperty("p", strings.Repeat("v", 40000)), "properties"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := p.SendSync(context.Background(), tc.msg)
			var ve *message.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field {
				t.Fatalf("want *ValidationError on %q, got %v", tc.field, err)
			}
		})
	}
	if n := len(b.Requests(remoting.SendMessageV2)) + len(ns.Requests(remoting.GetRouteInfoByTopic)); n != 0 {
		t.Fatalf("%d requests for invalid messages", n)
	}
}

func TestAutoCreateThroughTBW102(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"TBW102": routeJSON(8, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	seen := map[string]bool{}
	for i := 0; i < 16; i++ {
		if _, err := p.SendSync(context.Background(), message.NewMessage("NewTopic", []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range b.Requests(remoting.SendMessageV2) {
		if r.ExtFields["b"] != "NewTopic" || r.ExtFields["c"] != "TBW102" || r.ExtFields["d"] != "4" {
			t.Fatalf("header %v", r.ExtFields)
		}
		seen[r.ExtFields["e"]] = true
	}
	// TBW102 has 8 queues; the stand-in route is capped at 4.
	if len(seen) != 4 || !seen["0"] || !seen["3"] {
		t.Fatalf("queue ids used %v, want 0..3", seen)
	}

	// Neither the topic nor TBW102 routed: a *SendError wrapping the lookup failure.
	ns2 := newNamesrv(t, nil)
	p2 := newProducer(t, Config{NamesrvAddrs: []string{ns2.Addr()}})
	_, err := p2.SendSync(context.Background(), message.NewMessage("NewTopic", []byte("x")))
	var se *SendError
	if !errors.As(err, &se) || se.Attempts != 0 || !strings.Contains(err.Error(), "TBW102") {
		t.Fatalf("got %v", err)
	}
}

func TestCompression(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	big := bytes.Repeat([]byte("sluice "), 1000) // 7000 bytes ≥ 4096
	if _, err := p.SendSync(context.Background(), message.NewMessage("T", big)); err != nil {
		t.Fatal(err)
	}
	small := []byte(strings.Repeat("s", 4095))
	if _, err := p.SendSync(context.Background(), message.NewMessage("T", small)); err != nil {
		t.Fatal(err)
	}
	reqs := b.Requests(remoting.SendMessageV2)
	if reqs[0].ExtFields["f"] != "1" || len(reqs[0].Body) >= len(big) {
		t.Fatalf("big body: sysFlag %q, %d bytes", reqs[0].ExtFields["f"], len(reqs[0].Body))
	}
	out, err := message.Inflate(reqs[0].Body)
	if err != nil || !bytes.Equal(out, big) {
		t.Fatalf("inflate: %v", err)
	}
	if reqs[1].ExtFields["f"] != "0" || !bytes.Equal(reqs[1].Body, small) {
		t.Fatalf("small body compressed: %q", reqs[1].ExtFields["f"])
	}
}

func TestMiddlewaresAndLifecycle(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	var calls atomic.Int32
	var order []string
	mw := func(name string) middleware.SendMiddleware {
		return func(next middleware.SendFunc) middleware.SendFunc {
			return func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
				calls.Add(1)
				order = append(order, name)
				m.SetKeys("set-by-" + name)
				return next(ctx, m)
			}
		}
	}
	p, err := New(Config{NamesrvAddrs: []string{ns.Addr()}, Group: "pg", Logger: quiet, Middlewares: []middleware.SendMiddleware{mw("outer"), mw("inner")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendSync(context.Background(), message.NewMessage("T", []byte("x"))); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("before Start: %v", err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	send := p.SendFunc()
	if _, err := send(context.Background(), message.NewMessage("T", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order[len(order)-2:]) != "[outer inner]" {
		t.Fatalf("middleware order %v", order)
	}
	reqs := b.Requests(remoting.SendMessageV2)
	if got := message.UnmarshalProperties(reqs[len(reqs)-1].ExtFields["i"])["KEYS"]; got != "set-by-inner" {
		t.Fatalf("KEYS %q: the innermost middleware's change must reach the wire", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	un := b.Requests(remoting.UnregisterClient)
	if len(un) != 1 || un[0].ExtFields["producerGroup"] != "pg" || un[0].ExtFields["clientID"] != p.ClientID() {
		t.Fatalf("unregister %v", un)
	}
	if _, err := p.SendSync(context.Background(), message.NewMessage("T", []byte("x"))); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Shutdown: %v", err)
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := p.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Shutdown: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	ns := []string{"127.0.0.1:9876"}
	for name, c := range map[string]struct {
		cfg   Config
		field string
	}{
		"no namesrv":   {Config{}, "NamesrvAddrs"},
		"bad namesrv":  {Config{NamesrvAddrs: []string{"nohost"}}, "NamesrvAddrs[0]"},
		"bad group":    {Config{NamesrvAddrs: ns, Group: "a b"}, "Group"},
		"neg timeout":  {Config{NamesrvAddrs: ns, SendTimeout: -1}, "SendTimeout"},
		"neg max size": {Config{NamesrvAddrs: ns, MaxMessageSize: -1}, "MaxMessageSize"},
		"bad level":    {Config{NamesrvAddrs: ns, CompressLevel: 10}, "CompressLevel"},
	} {
		t.Run(name, func(t *testing.T) {
			var ce *config.Error
			if _, err := New(c.cfg); !errors.As(err, &ce) || ce.Package != "producer" || ce.Field != c.field || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("want a *config.Error naming %s, got %v", c.field, err)
			}
		})
	}
	// A bad group keeps its *message.ValidationError reachable.
	var ve *message.ValidationError
	if _, err := New(Config{NamesrvAddrs: ns, Group: "a b"}); !errors.As(err, &ve) || ve.Field != "group" {
		t.Fatalf("bad group: %v, want a *message.ValidationError inside", err)
	}
}

func TestSelectQueue(t *testing.T) {
	qs := []message.MessageQueue{
		{Topic: "T", BrokerName: "a", QueueID: 0}, {Topic: "T", BrokerName: "a", QueueID: 1},
		{Topic: "T", BrokerName: "b", QueueID: 0}, {Topic: "T", BrokerName: "b", QueueID: 1},
	}
	var c atomic.Uint32
	var got []string
	for i := 0; i < 5; i++ {
		got = append(got, selectQueue(qs, &c, "").String())
	}
	if fmt.Sprint(got) != "[T@a#0 T@a#1 T@b#0 T@b#1 T@a#0]" {
		t.Fatalf("round robin %v", got)
	}
	for _, tc := range []struct {
		start uint32
		avoid string
		want  string
	}{
		{0, "a", "T@b#0"}, {1, "a", "T@b#0"}, {2, "a", "T@b#0"}, {3, "a", "T@b#1"},
		{0, "b", "T@a#0"}, {1, "b", "T@a#1"}, {2, "b", "T@a#0"}, {3, "b", "T@a#0"}, {1, "c", "T@a#1"},
	} {
		c.Store(tc.start)
		if q := selectQueue(qs, &c, tc.avoid); q.String() != tc.want {
			t.Errorf("start %d avoid %q: %v, want %s", tc.start, tc.avoid, q, tc.want)
		}
	}
	// Only one broker: a retry stays on it.
	one := qs[:2]
	c.Store(0)
	if q := selectQueue(one, &c, "a"); q.BrokerName != "a" {
		t.Fatalf("single broker retry picked %v", q)
	}
	// Counter wrap-around stays in range.
	c.Store(^uint32(0))
	_ = selectQueue(qs, &c, "")
	_ = selectQueue(qs, &c, "")
}
