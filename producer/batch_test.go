package producer

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// uniq gives m a fixed-length UNIQ_KEY so its encoded size is known in advance.
func withUniq(m *message.Message) *message.Message {
	return m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
}

// encodedSize is what SendBatch checks against MaxMessageSize.
func encodedSize(msgs []*message.Message) int {
	n := 0
	for _, m := range msgs {
		n += message.BatchRecordSize(len(m.Body), len(message.MarshalProperties(m.Properties)))
	}
	return n
}

// exactBatch returns n messages of topic with UNIQ_KEYs whose encoded batch is exactly
// total bytes.
func exactBatch(topic string, n, total int) []*message.Message {
	msgs := make([]*message.Message, n)
	overhead := 0
	for i := range msgs {
		msgs[i] = withUniq(message.NewMessage(topic, nil))
		overhead += message.BatchRecordSize(0, len(message.MarshalProperties(msgs[i].Properties)))
	}
	left := total - overhead
	for i, m := range msgs {
		sz := left / (n - i)
		m.Body = bytes.Repeat([]byte{byte('a' + i%26)}, sz)
		left -= sz
	}
	return msgs
}

func TestSendBatchOnTheWire(t *testing.T) {
	b := fakeremote.Start(t, fakeremote.Handlers{remoting.SendBatchMessage: func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		r := remoting.NewResponse(remoting.Success, "")
		return r.SetExt("msgId", "7F00000100002A9F0000000000000010,7F00000100002A9F0000000000000099,7F00000100002A9F00000000000000F0").
			SetExt("queueId", req.ExtFields["e"]).SetExt("queueOffset", "40")
	}, remoting.HeartBeat: ok, remoting.UnregisterClient: ok})
	ns := newNamesrv(t, map[string]string{"T": routeJSON(2, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, Group: "pg"})
	big := bytes.Repeat([]byte("z"), 5000) // over the compression threshold: batches stay uncompressed
	msgs := []*message.Message{
		message.NewMessage("T", []byte("one")).SetTag("a").SetKeys("k1"),
		message.NewMessage("T", big),
		withUniq(message.NewMessage("T", []byte("three"))),
	}
	msgs[1].Flag = 7
	preset := msgs[2].UniqKey()
	r, err := p.SendBatch(context.Background(), msgs, WithQueue(message.MessageQueue{BrokerName: "broker-a", QueueID: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{msgs[0].UniqKey(), msgs[1].UniqKey(), preset}
	if ids[0] == "" || ids[1] == "" || ids[0] == ids[1] {
		t.Fatalf("UNIQ_KEYs %v", ids)
	}
	if r.MsgID != strings.Join(ids, ",") || r.QueueOffset != 40 || r.Queue.QueueID != 1 || strings.Count(r.OffsetMsgID, ",") != 2 {
		t.Fatalf("result %+v", r)
	}
	reqs := b.Requests(remoting.SendBatchMessage)
	if len(reqs) != 1 {
		t.Fatalf("%d batch requests", len(reqs))
	}
	h := reqs[0].ExtFields
	if h["b"] != "T" || h["m"] != "true" || h["f"] != "0" || h["e"] != "1" || h["a"] != "pg" || h["i"] != "" {
		t.Fatalf("header %v", h)
	}
	items, err := message.DecodeBatch(reqs[0].Body)
	if err != nil || len(items) != 3 || len(reqs[0].Body) != encodedSize(msgs) {
		t.Fatalf("body: %d items, %v, %d bytes (want %d)", len(items), err, len(reqs[0].Body), encodedSize(msgs))
	}
	for i, it := range items {
		props := message.UnmarshalProperties(it.Properties)
		if !bytes.Equal(it.Body, msgs[i].Body) || it.Flag != msgs[i].Flag || props["UNIQ_KEY"] != ids[i] {
			t.Fatalf("item %d: flag %d props %v", i, it.Flag, props)
		}
	}
	if p := message.UnmarshalProperties(items[0].Properties); p["TAGS"] != "a" || p["KEYS"] != "k1" {
		t.Fatalf("item 0 properties %v", p)
	}
}

// TestSendBatchRefusedBeforeNetwork: every rule violation is a *message.ValidationError,
// no request of any kind reaches the name server or the broker, and UNIQ_KEYs the
// producer assigned are taken back.
func TestSendBatchRefusedBeforeNetwork(t *testing.T) {
	b := fakeremote.Start(t, fakeremote.Handlers{remoting.SendBatchMessage: storeOK(remoting.Success), remoting.HeartBeat: ok, remoting.UnregisterClient: ok})
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	const limit = DefaultMaxMessageSize

	// Bodies summing to exactly the limit: the record headers and properties push the
	// encoded size above it.
	exact := make([]*message.Message, 4)
	for i := range exact {
		exact[i] = message.NewMessage("T", make([]byte, limit/4))
	}
	// Sizes are bytes: two bodies of 699,051 three-byte characters ("€") are 1,398,102
	// characters but 4,194,306 bytes.
	euroBody := []byte(strings.Repeat("€", limit/6+1))
	euro := []*message.Message{message.NewMessage("T", euroBody), message.NewMessage("T", euroBody)}

	for name, tc := range map[string]struct {
		msgs  []*message.Message
		field string
	}{
		"bodies sum to the limit": {exact, "batch"},
		"one byte over":           {exactBatch("T", 3, limit+1), "batch"},
		"multi-byte UTF-8":        {euro, "batch"},
		"two topics":              {[]*message.Message{message.NewMessage("T", []byte("a")), message.NewMessage("U", []byte("b"))}, "batch"},
		"delay level":             {[]*message.Message{message.NewMessage("T", []byte("a")), message.NewMessage("T", []byte("b")).SetDelayLevel(2)}, "batch"},
		"transactional":           {[]*message.Message{message.NewMessage("T", []byte("a")).SetProperty(message.PropertyTransactionPrepared, "true")}, "batch"},
		"retry topic":             {[]*message.Message{message.NewMessage("%RETRY%g", []byte("a"))}, "batch"},
		"DLQ topic":               {[]*message.Message{message.NewMessage("%DLQ%g", []byte("a"))}, "batch"},
		"system topic":            {[]*message.Message{message.NewMessage("SCHEDULE_TOPIC_XXXX", []byte("a"))}, "topic"},
		"empty":                   {nil, "batch"},
		"nil message":             {[]*message.Message{message.NewMessage("T", []byte("a")), nil}, "batch"},
		"empty body":              {[]*message.Message{message.NewMessage("T", nil)}, "body"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := p.SendBatch(context.Background(), tc.msgs)
			var ve *message.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field {
				t.Fatalf("want *ValidationError on %q, got %v", tc.field, err)
			}
			if name == "bodies sum to the limit" && (ve.Limit != limit || ve.Value <= limit) {
				t.Fatalf("limit %d value %d", ve.Limit, ve.Value)
			}
			for _, m := range tc.msgs {
				if m != nil && m.Topic == "T" && len(m.Body) > 0 && name != "one byte over" && m.UniqKey() != "" {
					t.Fatalf("UNIQ_KEY left on a refused message")
				}
			}
		})
	}
	if n := len(b.Requests(remoting.SendBatchMessage)) + len(ns.Requests(remoting.GetRouteInfoByTopic)); n != 0 {
		t.Fatalf("%d requests for refused batches", n)
	}
}

// TestSendBatchRealBroker: a batch of exactly 4,194,304 encoded bytes is accepted by the
// producer and stored by the broker (which refuses only len(body) > maxMessageSize); one
// byte more is refused by the producer; a broker with a smaller limit refuses a batch the
// producer let through, without retry.
func TestSendBatchRealBroker(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	createTopic(t, testbroker.Namesrv(b), "Batch", 1)
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), SendTimeout: 20 * time.Second})
	ctx := context.Background()

	msgs := exactBatch("Batch", 4, 4194304)
	if got := encodedSize(msgs); got != 4194304 {
		t.Fatalf("test batch encodes to %d", got)
	}
	r, err := p.SendBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != message.SendOK || r.QueueOffset != 0 || strings.Count(r.OffsetMsgID, ",") != 3 {
		t.Fatalf("result %+v", r)
	}
	if off := maxOffsets(t, b.Addr(), "Batch", 1); off[0] != 4 {
		t.Fatalf("max offset %v, want 4", off)
	}
	if _, err := p.SendBatch(ctx, exactBatch("Batch", 4, 4194305)); err == nil {
		t.Fatal("4,194,305 bytes accepted")
	}
	if off := maxOffsets(t, b.Addr(), "Batch", 1); off[0] != 4 {
		t.Fatalf("max offset %v after a refused batch", off)
	}
	// The stored messages come back intact, at consecutive offsets.
	col := poll(t, b.Addr(), "Batch", 1, message.PropertyUniqClientMessageIDKeyIdx)
	testkit.WaitFor(t, 30*time.Second, func() bool { return col.count() == 4 }, func() string { return strconv.Itoa(col.count()) + " of 4 received" })
	for i, m := range msgs {
		d := col.get(m.UniqKey())
		if len(d) != 1 || !bytes.Equal(d[0].msg.Body, m.Body) || d[0].msg.QueueOffset != int64(i) {
			t.Fatalf("message %d: %d deliveries", i, len(d))
		}
	}

	// Broker limit below the producer's: MESSAGE_ILLEGAL (13), one attempt.
	small, _ := testbroker.Start(t, broker.Config{MaxMessageSize: 1024})
	ps := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(small)})
	_, err = ps.SendBatch(ctx, exactBatch("Small", 2, 1025))
	var se *SendError
	var re *remoting.ResponseError
	if !errors.As(err, &se) || se.Attempts != 1 || !errors.As(err, &re) || re.Code != remoting.MessageIllegal || re.Request != remoting.SendBatchMessage {
		t.Fatalf("over the broker's limit: %v", err)
	}
	if _, err := ps.SendBatch(ctx, exactBatch("Small", 2, 1024)); err != nil {
		t.Fatalf("at the broker's limit: %v", err)
	}
}

func TestSplitBatch(t *testing.T) {
	// 10 bodies of 100 "é" (200 bytes each): by characters four would fit in 1024 bytes,
	// by bytes only three (3 × (22 + 200 + 41) = 789; four = 1052).
	var msgs []*message.Message
	for i := 0; i < 10; i++ {
		msgs = append(msgs, message.NewMessage("T", []byte(strings.Repeat("é", 100))).SetKeys("k"+strconv.Itoa(i)))
	}
	batches, err := SplitBatch(msgs, 1024)
	if err != nil {
		t.Fatal(err)
	}
	var flat []*message.Message
	for _, bt := range batches {
		if size := encodedSize(bt); size > 1024 || len(bt) == 0 {
			t.Fatalf("batch of %d messages encodes to %d bytes", len(bt), size)
		}
		flat = append(flat, bt...)
	}
	if len(flat) != 10 {
		t.Fatalf("%d messages after the split", len(flat))
	}
	for i := range flat {
		if flat[i] != msgs[i] || msgs[i].UniqKey() == "" {
			t.Fatalf("message %d out of order or without UNIQ_KEY", i)
		}
	}
	// Greedy: every batch but the last is full (the next message would not fit).
	for i, bt := range batches[:len(batches)-1] {
		next := batches[i+1][0]
		if encodedSize(append(append([]*message.Message(nil), bt...), next)) <= 1024 {
			t.Fatalf("batch %d could have taken one more", i)
		}
	}
	if len(batches) != 4 || len(batches[0]) != 3 {
		t.Fatalf("batch sizes: %d batches, first %d", len(batches), len(batches[0]))
	}
	// Appending to one batch does not overwrite the next.
	_ = append(batches[0], message.NewMessage("T", []byte("x")))
	if batches[1][0] != msgs[3] {
		t.Fatal("batches share capacity")
	}

	// Refusals change nothing.
	fresh := []*message.Message{message.NewMessage("T", []byte("a")), message.NewMessage("U", []byte("b"))}
	if _, err := SplitBatch(fresh, 0); err == nil || fresh[0].UniqKey() != "" {
		t.Fatalf("mixed topics: %v, UNIQ_KEY %q", err, fresh[0].UniqKey())
	}
	huge := []*message.Message{message.NewMessage("T", make([]byte, 1000))}
	var ve *message.ValidationError
	if _, err := SplitBatch(huge, 1000); !errors.As(err, &ve) || huge[0].UniqKey() != "" {
		t.Fatalf("message alone over the limit: %v", err)
	}
	if out, err := SplitBatch(nil, 0); out != nil || err != nil {
		t.Fatalf("empty: %v %v", out, err)
	}

	// The split batches are accepted by the producer and the broker.
	b, _ := testbroker.Start(t, broker.Config{})
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), MaxMessageSize: 1024})
	for _, bt := range batches {
		if _, err := p.SendBatch(context.Background(), bt); err != nil {
			t.Fatal(err)
		}
	}
}
