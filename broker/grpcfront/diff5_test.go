package grpcfront_test

// The differential suite for RocketMQ 5 clients: the same official Go v5 client cases run
// against Sluice's gRPC front end and against Apache RocketMQ 5.3.3 (proxy in LOCAL mode
// with its broker, and a name server; internal/peers), and what the client observes is
// compared. Skips without Java and the jars (bash .ci/peers), and with -short.

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/grpcfront"
	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/peers/peertest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/internal/testkit/testfront"
)

// The suite's topics (with their message type, which Apache RocketMQ 5 checks) and the
// FIFO group (orderly on the reference: it orders message groups only for such groups).
const (
	d5Normal    = "D5Normal"
	d5Redeliver = "D5Redeliver"
	d5Fifo      = "D5Fifo"
	d5Delay     = "D5Delay"
	d5FifoGroup = "D5FifoGroup"
)

// apache5Config is the reference broker's store configuration: the suite's topics with
// their message.type and the orderly FIFO group.
func apache5Config(t *testing.T) map[string]string {
	t.Helper()
	topics := map[string]any{}
	for name, typ := range map[string]string{d5Normal: "NORMAL", d5Redeliver: "NORMAL", d5Fifo: "FIFO", d5Delay: "DELAY"} {
		topics[name] = map[string]any{"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
			"topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": false, "attributes": map[string]string{"message.type": typ}}
	}
	groups := map[string]any{d5FifoGroup: map[string]any{"groupName": d5FifoGroup, "consumeEnable": true, "consumeFromMinEnable": true,
		"consumeBroadcastEnable": true, "consumeMessageOrderly": true, "retryQueueNums": 1, "retryMaxTimes": 16,
		"whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": true}}
	dv := map[string]any{"timestamp": 1, "counter": 1}
	tj, err := json.Marshal(map[string]any{"topicConfigTable": topics, "dataVersion": dv})
	if err != nil {
		t.Fatal(err)
	}
	gj, err := json.Marshal(map[string]any{"subscriptionGroupTable": groups, "dataVersion": dv})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"topics.json": string(tj), "subscriptionGroup.json": string(gj)}
}

// d5Outcome is what a case observed, in terms both systems should agree on.
type d5Outcome map[string]any

// d5Case is one scenario of the suite, run against the endpoint ep.
type d5Case struct {
	name string
	run  func(t *testing.T, ep string, lag func(string, time.Duration)) d5Outcome
	// known, for a difference written down in docs/rocketmq5.md, is the outcome each
	// target must have ("sluice", "apache"): the case then fails when either changes.
	known map[string]d5Outcome
}

// TestDifferentialRocketMQ5 runs every case against Sluice and against Apache RocketMQ
// 5.3.3 and fails on any difference in the outcomes (the differences written down in
// docs/rocketmq5.md are not asked of the cases). Timings (redelivery after the
// invisibility, timer delivery after due) are logged side by side, not compared.
func TestDifferentialRocketMQ5(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs two JVMs (Apache RocketMQ 5.3 name server and proxy+broker); run without -short")
	}
	if err := peers.Available("rocketmq5"); err != nil {
		t.Skipf("apache rocketmq 5: %v", err)
	}
	testkit.SkipGoV5AgainstApacheUnderRace(t)
	// Both with a 1 s minimum invisible duration (the reference's default is 10 s, Sluice's
	// too): the redelivery cases wait for invisibility to end.
	apache := peertest.StartRocketMQ5(t, peers.RocketMQ5Options{StoreConfigFiles: apache5Config(t),
		ProxyConf: map[string]any{"minInvisibleTimeMillsForRecv": 1000}})
	b, _ := testbroker.Start(t, broker.Config{})
	s := testfront.Start(t, b, grpcfront.Config{MinInvisibleDuration: time.Second})
	targets := []struct{ name, ep string }{{"sluice", s.Addr()}, {"apache-5.3.3", apache.GRPCAddr}}
	for _, c := range d5Cases() {
		t.Run(c.name, func(t *testing.T) {
			out := make([]d5Outcome, len(targets))
			lags := make([][]string, len(targets))
			for i, tg := range targets {
				out[i] = c.run(t, tg.ep, func(what string, d time.Duration) {
					lags[i] = append(lags[i], fmt.Sprintf("%s %v", what, d.Round(time.Millisecond)))
				})
				if t.Failed() {
					t.Fatalf("on %s", tg.name)
				}
			}
			for i, tg := range targets {
				if len(lags[i]) > 0 {
					t.Logf("%s: %s", tg.name, strings.Join(lags[i], ", "))
				}
			}
			if c.known != nil {
				for i, tg := range targets {
					if want := c.known[strings.SplitN(tg.name, "-", 2)[0]]; !reflect.DeepEqual(out[i], want) {
						t.Errorf("%s: %v, want the documented %v", tg.name, out[i], want)
					}
				}
				t.Logf("documented difference: %s: %v, %s: %v", targets[0].name, out[0], targets[1].name, out[1])
				return
			}
			if !reflect.DeepEqual(out[0], out[1]) {
				t.Errorf("outcomes differ:\n  %s: %v\n  %s: %v", targets[0].name, out[0], targets[1].name, out[1])
			} else {
				t.Logf("both: %v", out[0])
			}
		})
	}
}

func d5Producer(t *testing.T, ep string, topics ...string) rmq.Producer {
	t.Helper()
	p, err := rmq.NewProducer(&rmq.Config{Endpoint: ep, Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics(topics...))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.GracefulStop() })
	return p
}

func d5Consumer(t *testing.T, ep, group, topic string) rmq.SimpleConsumer {
	t.Helper()
	c, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: ep, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(5*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.GracefulStop() })
	return c
}

// d5Receive receives once; MESSAGE_NOT_FOUND is an empty answer.
func d5Receive(t *testing.T, c rmq.SimpleConsumer, max int32, invisible time.Duration) []*rmq.MessageView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mvs, err := c.Receive(ctx, max, invisible)
	if err != nil {
		if rs, ok := rmq.AsErrRpcStatus(err); ok && rs.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
			return nil
		}
		t.Fatalf("receive: %v", err)
	}
	return mvs
}

// d5Until receives (and gives each delivery to f) until done says so or timeout passes.
func d5Until(t *testing.T, c rmq.SimpleConsumer, invisible, timeout time.Duration, f func(*rmq.MessageView), done func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not done within %v", timeout)
		}
		for _, mv := range d5Receive(t, c, 16, invisible) {
			f(mv)
		}
	}
}

// d5Code is the status code of a call's error: "OK" for none, the protocol's code name
// for a status the server answered, else "client error: ...".
func d5Code(err error) string {
	if err == nil {
		return "OK"
	}
	if rs, ok := rmq.AsErrRpcStatus(err); ok {
		return v2.Code(rs.GetCode()).String()
	}
	return "client error: " + err.Error()
}

func d5Cases() []d5Case {
	return []d5Case{
		{name: "SendReceiveAck", run: func(t *testing.T, ep string, _ func(string, time.Duration)) d5Outcome {
			p := d5Producer(t, ep, d5Normal)
			o := d5Outcome{}
			ids := map[string]string{}
			for i := range 5 {
				m := &rmq.Message{Topic: d5Normal, Body: []byte(fmt.Sprintf("n-%d", i))}
				m.SetTag("TagA")
				m.SetKeys(fmt.Sprintf("K-%d", i))
				m.AddProperty("p", "v")
				rs, err := p.Send(testkit.Context(t, 20*time.Second), m)
				if err != nil {
					t.Fatalf("send: %v", err)
				}
				r := rs[0]
				o["send: receipts per send"] = len(rs)
				o["send: id length"] = len(r.MessageID)
				o["send: offset >= 0"] = r.Offset >= 0
				o["send: transaction id"] = map[bool]string{true: "the message id", false: fmt.Sprintf("%q", r.TransactionId)}[r.TransactionId == r.MessageID]
				o["send: recall handle"] = r.RecallHandle
				ids[fmt.Sprintf("n-%d", i)] = r.MessageID
			}
			c := d5Consumer(t, ep, "D5NormalGroup", d5Normal)
			var got []string
			var attempts []int32
			d5Until(t, c, 20*time.Second, 60*time.Second, func(mv *rmq.MessageView) {
				b := string(mv.GetBody())
				got = append(got, b)
				attempts = append(attempts, mv.GetDeliveryAttempt())
				o["recv: id is the send's"] = ids[b] == mv.GetMessageId()
				o["recv: tag"] = *mv.GetTag()
				o["recv: keys match body"] = slices.Equal(mv.GetKeys(), []string{"K-" + strings.TrimPrefix(b, "n-")})
				o["recv: properties"] = fmt.Sprint(mv.GetProperties())
				o["recv: topic"] = mv.GetTopic()
				if err := c.Ack(testkit.Context(t, 10*time.Second), mv); err != nil {
					t.Fatalf("ack: %v", err)
				}
			}, func() bool { return len(got) >= 5 })
			slices.Sort(got)
			o["recv: bodies"] = fmt.Sprint(got)
			o["recv: attempts"] = fmt.Sprint(attempts)
			// Acknowledged: nothing more comes (one long poll).
			o["after ack: redelivered"] = len(d5Receive(t, c, 16, 20*time.Second))
			return o
		}},
		{name: "InvisibleTimeRedelivery", run: func(t *testing.T, ep string, lag func(string, time.Duration)) d5Outcome {
			p := d5Producer(t, ep, d5Redeliver)
			rs, err := p.Send(testkit.Context(t, 20*time.Second), &rmq.Message{Topic: d5Redeliver, Body: []byte("again")})
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			c := d5Consumer(t, ep, "D5RedeliverGroup", d5Redeliver)
			o := d5Outcome{}
			const invisible = 3 * time.Second
			var attempts []int32
			var first time.Time
			d5Until(t, c, invisible, 90*time.Second, func(mv *rmq.MessageView) {
				attempts = append(attempts, mv.GetDeliveryAttempt())
				o["same id"] = mv.GetMessageId() == rs[0].MessageID
				if len(attempts) == 1 {
					first = time.Now()
					return // not acknowledged: back after its invisibility
				}
				gap := time.Since(first)
				o["again after the invisible duration"] = gap >= invisible-time.Second
				lag("redelivered after", gap)
				if err := c.Ack(testkit.Context(t, 10*time.Second), mv); err != nil {
					t.Fatalf("ack: %v", err)
				}
			}, func() bool { return len(attempts) >= 2 })
			o["attempts"] = fmt.Sprint(attempts)
			return o
		}},
		{name: "ChangeInvisibleDuration", run: func(t *testing.T, ep string, lag func(string, time.Duration)) d5Outcome {
			p := d5Producer(t, ep, d5Redeliver)
			if _, err := p.Send(testkit.Context(t, 20*time.Second), &rmq.Message{Topic: d5Redeliver, Body: []byte("nack")}); err != nil {
				t.Fatalf("send: %v", err)
			}
			c := d5Consumer(t, ep, "D5NackGroup", d5Redeliver)
			o := d5Outcome{}
			var attempts []int32
			var changed time.Time
			d5Until(t, c, 30*time.Second, 60*time.Second, func(mv *rmq.MessageView) {
				if string(mv.GetBody()) != "nack" { // the topic's message of InvisibleTimeRedelivery
					if err := c.Ack(testkit.Context(t, 10*time.Second), mv); err != nil {
						t.Fatalf("ack: %v", err)
					}
					return
				}
				attempts = append(attempts, mv.GetDeliveryAttempt())
				if len(attempts) == 1 { // given back: visible again in 1 s
					changed = time.Now()
					o["change: error"] = fmt.Sprint(c.ChangeInvisibleDuration(mv, time.Second))
					return
				}
				lag("back after the change", time.Since(changed))
				if err := c.Ack(testkit.Context(t, 10*time.Second), mv); err != nil {
					t.Fatalf("ack: %v", err)
				}
			}, func() bool { return len(attempts) >= 2 })
			o["attempts"] = fmt.Sprint(attempts)
			return o
		}},
		{name: "InvisibleDurationOutOfRange", run: func(t *testing.T, ep string, _ func(string, time.Duration)) d5Outcome {
			c := d5Consumer(t, ep, "D5RangeGroup", d5Normal)
			o := d5Outcome{}
			for _, d := range []time.Duration{100 * time.Millisecond, 13 * time.Hour} {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := c.Receive(ctx, 1, d)
				cancel()
				o[fmt.Sprintf("receive invisible %v", d)] = d5Code(err)
			}
			return o
		}},
		{name: "UnknownTopic", run: func(t *testing.T, ep string, _ func(string, time.Duration)) d5Outcome {
			p := d5Producer(t, ep, d5Normal) // v5.1.4's Start waits for a route: give it a topic
			_, err := p.Send(testkit.Context(t, 20*time.Second), &rmq.Message{Topic: "D5NeverCreated", Body: []byte("x")})
			return d5Outcome{"send": d5Code(err)}
		}, known: map[string]d5Outcome{"sluice": {"send": "OK"}, "apache": {"send": "TOPIC_NOT_FOUND"}}},
		{name: "MessageTypeOfTopic", run: func(t *testing.T, ep string, _ func(string, time.Duration)) d5Outcome {
			p := d5Producer(t, ep, d5Normal)
			m := &rmq.Message{Topic: d5Normal, Body: []byte("fifo on a normal topic")}
			m.SetMessageGroup("g")
			_, err := p.Send(testkit.Context(t, 20*time.Second), m)
			return d5Outcome{"FIFO send to a NORMAL topic": d5Code(err)}
		}, known: map[string]d5Outcome{"sluice": {"FIFO send to a NORMAL topic": "OK"}, "apache": {"FIFO send to a NORMAL topic": "client error: current message type not match with topic accept message types"}}},
		{name: "FIFOOrder", run: func(t *testing.T, ep string, _ func(string, time.Duration)) d5Outcome {
			p := d5Producer(t, ep, d5Fifo)
			const groups, per = 3, 4
			for i := range per {
				for g := range groups {
					m := &rmq.Message{Topic: d5Fifo, Body: []byte(fmt.Sprintf("g%d/%d", g, i))}
					m.SetMessageGroup(fmt.Sprintf("g%d", g))
					if _, err := p.Send(testkit.Context(t, 20*time.Second), m); err != nil {
						t.Fatalf("send: %v", err)
					}
				}
			}
			c := d5Consumer(t, ep, d5FifoGroup, d5Fifo)
			order := map[string][]string{}
			n := 0
			d5Until(t, c, 20*time.Second, 60*time.Second, func(mv *rmq.MessageView) {
				g := ""
				if mg := mv.GetMessageGroup(); mg != nil {
					g = *mg
				}
				order[g] = append(order[g], string(mv.GetBody()))
				n++
				if err := c.Ack(testkit.Context(t, 10*time.Second), mv); err != nil {
					t.Fatalf("ack: %v", err)
				}
			}, func() bool { return n >= groups*per })
			o := d5Outcome{}
			for g, bodies := range order {
				o["group "+g] = strings.Join(bodies, " ")
			}
			return o
		}},
		{name: "TimerDelivery", run: func(t *testing.T, ep string, lag func(string, time.Duration)) d5Outcome {
			p := d5Producer(t, ep, d5Delay)
			due := time.Now().Add(3 * time.Second)
			m := &rmq.Message{Topic: d5Delay, Body: []byte("later")}
			m.SetDelayTimestamp(due)
			rs, err := p.Send(testkit.Context(t, 20*time.Second), m)
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			c := d5Consumer(t, ep, "D5DelayGroup", d5Delay)
			o := d5Outcome{"send: recall handle set": rs[0].RecallHandle != ""}
			n := 0
			d5Until(t, c, 20*time.Second, 60*time.Second, func(mv *rmq.MessageView) {
				n++
				at := time.Now()
				o["body"] = string(mv.GetBody())
				o["not before due"] = !at.Before(due)
				dt := mv.GetDeliveryTimestamp()
				o["delivery timestamp shown"] = dt != nil && dt.UnixMilli() == due.UnixMilli()
				lag("delivered after due", at.Sub(due))
				if err := c.Ack(testkit.Context(t, 10*time.Second), mv); err != nil {
					t.Fatalf("ack: %v", err)
				}
			}, func() bool { return n >= 1 })
			o["deliveries"] = n
			return o
		}},
	}
}
