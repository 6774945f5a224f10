package grpcfront_test

// The official Apache RocketMQ Java client 5.x (org.apache.rocketmq:rocketmq-client-java
// 5.0.8, through the peers' driver internal/peers/javadriver5) against the gRPC front end
// of an embedded broker. Skips without Java and the driver's jars (bash .ci/peers).

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/peers/peertest"
)

// TestJavaClient5 runs the Java client's producer (normal, FIFO, delay, transactional
// with check-back), SimpleConsumer and PushConsumer against one front end, one subtest a
// scenario, each on its own topic and group.
func TestJavaClient5(t *testing.T) {
	d := peertest.JavaDriver5(t)
	_, s := front(t, func(c *broker.Config) {
		c.TransactionCheckInterval = 1000
		c.TransactionTimeOut = 1000
	})
	ep := s.Addr()
	const jvm = 90 * time.Second // a driver run: JVM start, client start, the scenario

	t.Run("SendSimpleConsumerAck", func(t *testing.T) {
		const topic, group, n = "J5Normal", "J5NormalGroup", 20
		sent := peertest.Of(d.Run(t, jvm, "send", "--endpoint", ep, "--topic", topic, "--n", strconv.Itoa(n)), "sent")
		ids := map[string]string{} // body -> message id the send returned
		for _, e := range sent {
			if !e.OK || e.MsgID == "" {
				t.Fatalf("send %d: %+v", e.I, e)
			}
			ids[e.Body] = e.MsgID
		}
		if len(ids) != n {
			t.Fatalf("%d distinct sends answered, want %d", len(ids), n)
		}
		// m-3 is left unacknowledged on its first delivery: it must come back (attempt 2)
		// when its 5 s of invisibility end, and be acknowledged then. One message a receive:
		// each is acknowledged well within its invisibility even on a loaded machine (with
		// 2 s and batches of 16, a JVM at load 24 acknowledged the last of a batch late).
		evs := d.Run(t, jvm, "simple", "--endpoint", ep, "--topic", topic, "--group", group, "--n", strconv.Itoa(n),
			"--invisible-ms", "5000", "--batch", "1", "--skip-ack", "m-3")
		recv := peertest.Of(evs, "recv")
		attempts := map[string][]int{}
		for _, e := range recv {
			if e.Topic != topic || e.Tag != "TagA" || e.Keys != "K-"+strings.TrimPrefix(e.Body, "m-") {
				t.Fatalf("delivery %+v: want topic %s, tag TagA, key K-<i>", e, topic)
			}
			if ids[e.Body] != e.MsgID {
				t.Fatalf("delivery of %s has id %s, its send answered %s", e.Body, e.MsgID, ids[e.Body])
			}
			attempts[e.Body] = append(attempts[e.Body], e.Attempt)
		}
		for body := range ids {
			want := "[1]"
			if body == "m-3" {
				want = "[1 2]"
			}
			if got := fmt.Sprint(attempts[body]); got != want {
				t.Errorf("%s delivered with attempts %s, want %s", body, got, want)
			}
		}
		if done := peertest.Of(evs, "done"); len(done) != 1 || done[0].Acked != n {
			t.Fatalf("done: %+v, want %d acked", done, n)
		}
	})

	t.Run("FIFOMessageGroups", func(t *testing.T) {
		const topic, group, groups, n = "J5Fifo", "J5FifoGroup", 3, 15
		for _, e := range peertest.Of(d.Run(t, jvm, "send", "--endpoint", ep, "--topic", topic, "--n", strconv.Itoa(n),
			"--type", "fifo", "--groups", strconv.Itoa(groups)), "sent") {
			if !e.OK || e.Group != fmt.Sprintf("g%d", e.I%groups) {
				t.Fatalf("send %d: %+v", e.I, e)
			}
		}
		recv := peertest.Of(d.Run(t, jvm, "simple", "--endpoint", ep, "--topic", topic, "--group", group,
			"--n", strconv.Itoa(n), "--invisible-ms", "20000"), "recv")
		order := map[string][]int{}
		for _, e := range recv {
			i, err := strconv.Atoi(strings.TrimPrefix(e.Body, "m-"))
			if err != nil || e.Group != fmt.Sprintf("g%d", i%groups) || e.Attempt != 1 {
				t.Fatalf("delivery %+v: body m-<i> in group g<i mod %d>, first attempt", e, groups)
			}
			order[e.Group] = append(order[e.Group], i)
		}
		for g := range groups {
			var want []int
			for i := g; i < n; i += groups {
				want = append(want, i)
			}
			if got := order[fmt.Sprintf("g%d", g)]; !slices.Equal(got, want) {
				t.Errorf("group g%d received in order %v, want %v", g, got, want)
			}
		}
	})

	t.Run("DelayMessage", func(t *testing.T) {
		const topic, group = "J5Delay", "J5DelayGroup"
		sent := peertest.Of(d.Run(t, jvm, "send", "--endpoint", ep, "--topic", topic, "--n", "2",
			"--type", "delay", "--delay-ms", "3000"), "sent")
		due := map[string]int64{}
		for _, e := range sent {
			if !e.OK || e.Due == 0 {
				t.Fatalf("send %d: %+v", e.I, e)
			}
			due[e.Body] = e.Due
		}
		recv := peertest.Of(d.Run(t, jvm, "simple", "--endpoint", ep, "--topic", topic, "--group", group, "--n", "2"), "recv")
		if len(recv) != 2 {
			t.Fatalf("received %+v, want the 2 delay messages once each", recv)
		}
		for _, e := range recv {
			if e.Ms < due[e.Body] {
				t.Errorf("%s received at %d, %d ms before its delivery time", e.Body, e.Ms, due[e.Body]-e.Ms)
			}
			t.Logf("%s received %d ms after its delivery time", e.Body, e.Ms-due[e.Body])
		}
	})

	t.Run("TransactionCommitAndCheckBack", func(t *testing.T) {
		const topic, group = "J5Txn", "J5TxnGroup"
		// m-0 committed, m-1 left open (the broker's check-back asks the producer, whose
		// checker commits), m-2 rolled back.
		evs := d.Run(t, jvm, "send", "--endpoint", ep, "--topic", topic, "--n", "3", "--type", "txn",
			"--txn", "commit,unknown,rollback", "--check", "commit", "--linger-ms", "30000")
		for _, e := range peertest.Of(evs, "sent") {
			if !e.OK || e.MsgID == "" {
				t.Fatalf("send %d: %+v", e.I, e)
			}
		}
		checks := peertest.Of(evs, "check")
		if len(checks) == 0 || checks[0].Body != "m-1" {
			t.Fatalf("check-backs %+v, want m-1's", checks)
		}
		for _, c := range checks {
			if c.Body != "m-1" {
				t.Errorf("check-back for %s, which the producer ended", c.Body)
			}
		}
		recv := peertest.Of(d.Run(t, jvm, "simple", "--endpoint", ep, "--topic", topic, "--group", group, "--n", "2"), "recv")
		var bodies []string
		for _, e := range recv {
			bodies = append(bodies, e.Body)
		}
		slices.Sort(bodies)
		if fmt.Sprint(bodies) != "[m-0 m-1]" {
			t.Fatalf("received %v, want the committed m-0 and the checked-back m-1 (not the rolled-back m-2)", bodies)
		}
	})

	t.Run("PushConsumer", func(t *testing.T) {
		const topic, group, n = "J5Push", "J5PushGroup", 10
		peertest.Of(d.Run(t, jvm, "send", "--endpoint", ep, "--topic", topic, "--n", strconv.Itoa(n)), "sent")
		evs := d.Run(t, jvm, "push", "--endpoint", ep, "--topic", topic, "--group", group, "--n", strconv.Itoa(n))
		got := map[string]int{}
		for _, e := range peertest.Of(evs, "recv") {
			got[e.Body]++
		}
		for i := range n {
			if b := fmt.Sprintf("m-%d", i); got[b] != 1 {
				t.Errorf("%s consumed %d times, want once", b, got[b])
			}
		}
		if len(got) != n {
			t.Errorf("consumed %v, want m-0..m-%d", got, n-1)
		}
	})
}
