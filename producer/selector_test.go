package producer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func queuesOf(topic string, perBroker int, brokers ...string) []message.MessageQueue {
	var out []message.MessageQueue
	for _, b := range brokers {
		for q := 0; q < perBroker; q++ {
			out = append(out, message.MessageQueue{Topic: topic, BrokerName: b, QueueID: q})
		}
	}
	return out
}

func TestRoundRobinSelector(t *testing.T) {
	qs := queuesOf("T", 2, "a", "b")
	sel := RoundRobinSelector()
	msg := message.NewMessage("T", []byte("x"))
	var got []string
	for i := 0; i < 5; i++ {
		q, err := sel.Select(msg, qs, "")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, q.String())
	}
	if fmt.Sprint(got) != "[T@a#0 T@a#1 T@b#0 T@b#1 T@a#0]" {
		t.Fatalf("round robin %v", got)
	}
	// Counters are per topic.
	if q, _ := sel.Select(message.NewMessage("U", []byte("x")), queuesOf("U", 2, "a", "b"), ""); q.String() != "U@a#0" {
		t.Fatalf("first pick of another topic: %v", q)
	}
	// A retry avoids the last broker.
	for i := 0; i < 8; i++ {
		if q, _ := sel.Select(msg, qs, "a"); q.BrokerName != "b" {
			t.Fatalf("retry after broker a picked %v", q)
		}
	}
	if _, err := sel.Select(msg, nil, ""); !errors.Is(err, ErrNoQueue) {
		t.Fatalf("empty list: %v", err)
	}
}

// fakeClock is a settable clock for the fault table.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newTestFault(c *fakeClock) *latencyFault {
	f := newLatencyFault(DefaultLatencyFaultRules(), DefaultFaultIsolationDuration)
	f.base, f.now = c.t, c.now
	return f
}

func TestLatencyFaultTable(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	f := newTestFault(clk)
	for _, tc := range []struct {
		latency time.Duration
		want    time.Duration
	}{
		{0, 0}, {100 * time.Millisecond, 0}, {549 * time.Millisecond, 0},
		{550 * time.Millisecond, 30 * time.Second}, {999 * time.Millisecond, 30 * time.Second},
		{time.Second, 60 * time.Second}, {2 * time.Second, 120 * time.Second}, {2999 * time.Millisecond, 120 * time.Second},
		{3 * time.Second, 180 * time.Second}, {15 * time.Second, 600 * time.Second}, {time.Hour, 600 * time.Second},
	} {
		if got := f.window(tc.latency); got != tc.want {
			t.Errorf("latency %v: not available %v, want %v", tc.latency, got, tc.want)
		}
	}

	// Fast answers leave no entry at all.
	f.update("a", 10*time.Millisecond, false)
	if f.any.Load() || !f.available("a") {
		t.Fatal("a fast answer made an entry")
	}
	// A slow answer (1.2 s) → 60 s.
	f.update("a", 1200*time.Millisecond, false)
	if f.available("a") || f.remaining("a") != 60*time.Second {
		t.Fatalf("slow broker: available %v, remaining %v", f.available("a"), f.remaining("a"))
	}
	clk.add(59 * time.Second)
	if f.available("a") {
		t.Fatal("available before its window passed")
	}
	clk.add(time.Second)
	if !f.available("a") || f.remaining("a") != 0 {
		t.Fatal("not available after its window")
	}
	// A failure isolates for FaultIsolationDuration (30 s); a slow failure (16 s) for
	// the longer table window.
	f.update("b", 5*time.Millisecond, true)
	if f.remaining("b") != 30*time.Second {
		t.Fatalf("failed broker remaining %v", f.remaining("b"))
	}
	f.update("c", 16*time.Second, true)
	if f.remaining("c") != 600*time.Second {
		t.Fatalf("slow failed broker remaining %v", f.remaining("c"))
	}
	if av := f.avoided(); len(av) != 2 || av["b"] != 30*time.Second || av["c"] != 600*time.Second {
		t.Fatalf("avoided %v", av)
	}
	// A fast success clears the window at once.
	f.update("c", time.Millisecond, false)
	if !f.available("c") {
		t.Fatal("a fast success did not make the broker available")
	}
}

func TestRoundRobinAvoidsFaultyBrokers(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	f := newTestFault(clk)
	rr := RoundRobinSelector().(*roundRobin)
	qs := queuesOf("T", 2, "a", "b", "c")
	msg := message.NewMessage("T", []byte("x"))
	f.update("b", 0, true) // b isolated for 30 s
	count := map[string]int{}
	for i := 0; i < 60; i++ {
		count[rr.selectAvailable(msg, qs, "", f).String()]++
	}
	if count["T@b#0"]+count["T@b#1"] != 0 {
		t.Fatalf("avoided broker used: %v", count)
	}
	// The four available queues share the load evenly (each probe advances the counter).
	for _, q := range []string{"T@a#0", "T@a#1", "T@c#0", "T@c#1"} {
		if count[q] < 10 {
			t.Fatalf("queue %s got %d of 60: %v", q, count[q], count)
		}
	}
	// A retry after a failure on a goes to c while c is available.
	for i := 0; i < 6; i++ {
		if q := rr.selectAvailable(msg, qs, "a", f); q.BrokerName != "c" {
			t.Fatalf("retry after a picked %v", q)
		}
	}
	// Only a available, and it was the last broker: it is still used.
	f.update("c", 0, true)
	if q := rr.selectAvailable(msg, qs, "a", f); q.BrokerName != "a" {
		t.Fatalf("only available broker not picked: %v", q)
	}
	// All avoided: the one whose window ends first (a: 16 s → 600 s; b: 30 s, 10 s
	// gone; c: 30 s).
	f.update("a", 16*time.Second, false)
	clk.add(10 * time.Second)
	f.update("c", 0, true)
	for i := 0; i < 4; i++ {
		if q := rr.selectAvailable(msg, qs, "", f); q.BrokerName != "b" {
			t.Fatalf("all avoided: picked %v, want the soonest available b (%v)", q, f.avoided())
		}
	}
	// Once b's window passes it is used alone.
	clk.add(20 * time.Second)
	if q := rr.selectAvailable(msg, qs, "", f); q.BrokerName != "b" || !f.available("b") {
		t.Fatalf("after b's window: %v", q)
	}
}

func TestHashSelector(t *testing.T) {
	sel := HashSelector()
	qs := queuesOf("T", 4, "broker-a", "broker-b")
	for i := 0; i < 200; i++ {
		key := "order-" + strconv.Itoa(i) + "-ü"
		h := fnv.New32a()
		h.Write([]byte(key))
		want := qs[h.Sum32()%uint32(len(qs))]
		if fnv32a(key) != h.Sum32() {
			t.Fatalf("fnv32a(%q) = %d, hash/fnv %d", key, fnv32a(key), h.Sum32())
		}
		msg := message.NewMessage("T", []byte("x")).SetShardingKey(key)
		for _, last := range []string{"", "broker-a", "broker-b"} { // retries stay on the queue
			got, err := sel.Select(msg, qs, last)
			if err != nil || got != want {
				t.Fatalf("key %q last %q: %v %v, want %v", key, last, got, err, want)
			}
		}
	}
	// Queue lists come sorted by broker name then queue id from any route order, so two
	// producers that got the brokers in different orders agree.
	rd1 := &wire.TopicRouteData{
		QueueDatas: []wire.QueueData{{BrokerName: "broker-b", WriteQueueNums: 4, ReadQueueNums: 4, Perm: 6}, {BrokerName: "broker-a", WriteQueueNums: 4, ReadQueueNums: 4, Perm: 6}},
		BrokerDatas: []wire.BrokerData{{BrokerName: "broker-b", BrokerAddrs: map[int64]string{0: "127.0.0.1:2"}},
			{BrokerName: "broker-a", BrokerAddrs: map[int64]string{0: "127.0.0.1:1"}}},
	}
	rd2 := rd1.Clone()
	rd2.QueueDatas[0], rd2.QueueDatas[1] = rd2.QueueDatas[1], rd2.QueueDatas[0]
	q1, _ := wire.PublishQueues("T", rd1)
	q2, _ := wire.PublishQueues("T", rd2)
	if fmt.Sprint(q1) != fmt.Sprint(qs) || fmt.Sprint(q2) != fmt.Sprint(qs) {
		t.Fatalf("queue lists not sorted alike:\n%v\n%v\n%v", q1, q2, qs)
	}
	if !sort.SliceIsSorted(q1, func(i, j int) bool { return q1[i].Less(q1[j]) }) {
		t.Fatal("not sorted")
	}

	_, err := sel.Select(message.NewMessage("T", []byte("x")), qs, "")
	var ve *message.ValidationError
	if !errors.As(err, &ve) || ve.Field != "shardingKey" {
		t.Fatalf("no sharding key: %v", err)
	}
}

func TestManualSelector(t *testing.T) {
	qs := queuesOf("T", 2, "a", "b")
	msg := message.NewMessage("T", []byte("x"))
	q, err := ManualSelector(message.MessageQueue{Topic: "T", BrokerName: "b", QueueID: 1}).Select(msg, qs, "b")
	if err != nil || q.String() != "T@b#1" {
		t.Fatalf("%v %v", q, err)
	}
	for name, mq := range map[string]message.MessageQueue{
		"missing queue":  {BrokerName: "b", QueueID: 2},
		"missing broker": {BrokerName: "z", QueueID: 0},
		"other topic":    {Topic: "U", BrokerName: "a", QueueID: 0},
		"ambiguous id":   {QueueID: 0},
	} {
		if _, err := ManualSelector(mq).Select(msg, qs, ""); !errors.Is(err, ErrQueueNotFound) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Broker name may be left out when the topic is on one broker.
	if q, err := ManualSelector(message.MessageQueue{QueueID: 1}).Select(msg, queuesOf("T", 2, "a"), ""); err != nil || q.String() != "T@a#1" {
		t.Fatalf("%v %v", q, err)
	}
}

// TestSelectorsOnTheWire sends through each selector against fake brokers and checks
// the queue in the request header.
func TestSelectorsOnTheWire(t *testing.T) {
	a := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(3, [2]string{"broker-b", b.Addr()}, [2]string{"broker-a", a.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	ctx := context.Background()
	qs := queuesOf("T", 3, "broker-a", "broker-b")

	for i := 0; i < 20; i++ {
		key := "k" + strconv.Itoa(i)
		r, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")).SetShardingKey(key), WithSelector(HashSelector()))
		if err != nil {
			t.Fatal(err)
		}
		if want := qs[fnv32a(key)%6]; r.Queue != want {
			t.Fatalf("key %s on %v, want %v", key, r.Queue, want)
		}
	}
	r, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")), WithQueue(message.MessageQueue{BrokerName: "broker-b", QueueID: 2}))
	if err != nil || r.Queue.String() != "T@broker-b#2" {
		t.Fatalf("manual: %v %v", r, err)
	}
	last := b.Requests(remoting.SendMessageV2)
	if h := last[len(last)-1].ExtFields; h["e"] != "2" || h["n"] != "broker-b" {
		t.Fatalf("header %v", h)
	}

	before := len(a.Requests(remoting.SendMessageV2)) + len(b.Requests(remoting.SendMessageV2))
	_, err = p.SendSync(ctx, message.NewMessage("T", []byte("x")), WithQueue(message.MessageQueue{BrokerName: "broker-b", QueueID: 3}))
	var se *SendError
	if !errors.As(err, &se) || !errors.Is(err, ErrQueueNotFound) || se.Attempts != 0 {
		t.Fatalf("manual queue outside the route: %v", err)
	}
	_, err = p.SendSync(ctx, message.NewMessage("T", []byte("x")), WithSelector(HashSelector()))
	var ve *message.ValidationError
	if !errors.As(err, &ve) || ve.Field != "shardingKey" {
		t.Fatalf("hash without key: %v", err)
	}
	// A custom selector returning a queue that is not in the route.
	bogus := SelectorFunc(func(*message.Message, []message.MessageQueue, string) (message.MessageQueue, error) {
		return message.MessageQueue{Topic: "T", BrokerName: "broker-z", QueueID: 0}, nil
	})
	if _, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")), WithSelector(bogus)); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("bogus selector: %v", err)
	}
	if after := len(a.Requests(remoting.SendMessageV2)) + len(b.Requests(remoting.SendMessageV2)); after != before {
		t.Fatalf("%d requests sent for refused selections", after-before)
	}

	// Config.Selector is the default for every send.
	p2 := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, Selector: HashSelector()})
	r, err = p2.SendSync(ctx, message.NewMessage("T", []byte("x")).SetShardingKey("k3"))
	if err != nil || r.Queue != qs[fnv32a("k3")%6] {
		t.Fatalf("config selector: %v %v", r, err)
	}
}
