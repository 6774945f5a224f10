package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/brokermetrics"
	"github.com/sluicemq/sluice/console"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

func ctx(t *testing.T) context.Context { return testkit.Context(t, 20*time.Second) }

// env is an ephemeral broker, an admin client, a producer, a raw remoting client and a
// running console.
type env struct {
	b    *broker.Broker
	a    *admin.Admin
	p    *producer.Producer
	rc   *remoting.Client
	c    *console.Console
	base string // "http://127.0.0.1:port"
}

func newEnv(t *testing.T, mod func(*console.Config), bcfg broker.Config) *env {
	t.Helper()
	quiet := testkit.Quiet()
	bcfg.Logger = quiet
	b, stop, err := broker.StartEphemeral(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, stop)
	e := &env{b: b}
	if e.a, err = admin.New(admin.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Timeout: 15 * time.Second, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.a.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(brokermetrics.NewCollector(b))
	cfg := console.Config{Admin: e.a, Listen: "127.0.0.1:0", Logger: quiet, Metrics: []prometheus.Gatherer{reg},
		SampleInterval: 200 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	if e.c, err = console.New(cfg); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, e.c.Shutdown)
	e.base = "http://" + e.c.Addr()
	return e
}

func (e *env) producer(t *testing.T) *producer.Producer {
	t.Helper()
	if e.p != nil {
		return e.p
	}
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{e.b.NamesrvAddr()}, Group: "console-pg", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, p.Shutdown)
	e.p = p
	return p
}

// send sends n messages to topic with keys key-0..key-(n-1) and returns the results.
func (e *env) send(t *testing.T, topic string, n int) []*message.SendResult {
	t.Helper()
	var out []*message.SendResult
	for i := range n {
		m := message.NewMessage(topic, []byte(`{"order":`+strconv.Itoa(i)+`,"amount":"12.50"}`)).SetTag("Paid").SetKeys("key-" + strconv.Itoa(i))
		m.SetProperty("region", "eu-west")
		r, err := e.producer(t).SendSync(ctx(t), m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// raw returns the env's raw remoting client (made on first use).
func (e *env) raw(t *testing.T) *remoting.Client {
	t.Helper()
	if e.rc == nil {
		rc, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rc.Close() })
		e.rc = rc
	}
	return e.rc
}

// commit stores group's offset of topic's queue with UPDATE_CONSUMER_OFFSET, as a
// consumer does.
func (e *env) commit(t *testing.T, group, topic string, queue int, offset int64) {
	t.Helper()
	resp, err := e.raw(t).InvokeSync(ctx(t), e.b.Addr(), remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{
		"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(queue), "commitOffset": strconv.FormatInt(offset, 10)}, nil))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("commit %s %s/%d: %v %v", group, topic, queue, err, resp)
	}
}

// kill sends a stored message to the group's DLQ, as a consumer does after its last retry
// (CONSUMER_SEND_MSG_BACK with delay level -1).
func (e *env) kill(t *testing.T, group string, r *message.SendResult) {
	t.Helper()
	e.raw(t)
	_, phy, err := message.ParseOffsetMsgID(r.OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.rc.InvokeSync(ctx(t), e.b.Addr(), remoting.NewRequest(remoting.ConsumerSendMsgBack, map[string]string{
		"offset": strconv.FormatInt(phy, 10), "group": group, "delayLevel": "-1", "originMsgId": r.MsgID}, nil))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("send back: %v %v", err, resp)
	}
}

// client is an HTTP client without redirects and idle connections.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do sends a request and returns the status and body.
func do(t *testing.T, method, u string, form url.Values, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v // net/http takes the Host header from the request, not Header
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}
