package kafka

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// TestForgedControlHeadersIgnored (issue 26, finding 5): Sluice's control headers were
// trusted from any producer. A plain kafka-go Writer setting SLUICE_DUE_MS a day ahead
// stalled the partition, SLUICE_ORIGIN_TOPIC routed a record past the handler's tag
// filter, and SLUICE_RECONSUME_TIMES=16 dead-lettered a record at its first failure. On
// a main topic they are now ignored (and counted); on the group's own retry topics they
// still work.
func TestForgedControlHeadersIgnored(t *testing.T) {
	c := newCluster(t, 1, "pay")
	brokers := c.ListenAddrs()
	ctx := ctxT(t, 60*time.Second)
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Topic: "pay", BatchTimeout: time.Millisecond, RequiredAcks: kafkago.RequireAll,
		Transport: &kafkago.Transport{}}
	defer func() { _ = w.Close(); w.Transport.(*kafkago.Transport).CloseIdleConnections() }()
	h := func(kv ...string) []kafkago.Header {
		var out []kafkago.Header
		for i := 0; i < len(kv); i += 2 {
			out = append(out, kafkago.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	if err := w.WriteMessages(ctx,
		kafkago.Message{Value: []byte("stall"), Headers: h("TAGS", "TagA", HeaderDueMs, strconv.FormatInt(time.Now().Add(24*time.Hour).UnixMilli(), 10))},
		kafkago.Message{Value: []byte("filtered"), Headers: h("TAGS", "Other", HeaderOriginTopic, "pay")},
		kafkago.Message{Value: []byte("dlq"), Headers: h("TAGS", "TagA", HeaderReconsumeTimes, "16")},
		kafkago.Message{Value: []byte("ok"), Headers: h("TAGS", "TagA")},
	); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	tries := map[string][]int32{}
	cfg := fastConfig(t, brokers, "g-forged")
	cfg.MaxReconsumeTimes = Retries(3)
	cons := startConsumer(t, cfg, func(c *Consumer) {
		if err := c.Subscribe("pay", "TagA", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			m := msgs[0]
			mu.Lock()
			tries[string(m.Body)] = append(tries[string(m.Body)], m.ReconsumeTimes)
			mu.Unlock()
			if string(m.Body) == "dlq" && m.ReconsumeTimes == 0 {
				return message.ReconsumeLater, errors.New("first failure")
			}
			return message.ConsumeSuccess, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	defer shutdown(t, cons, 10*time.Second)
	seenAll := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(tries["stall"]) == 1 && len(tries["ok"]) == 1 && len(tries["dlq"]) == 2
	}
	testkit.WaitFor(t, 20*time.Second, seenAll, "the records behind a forged due time, and the failed one's retry")
	mu.Lock()
	defer mu.Unlock()
	if len(tries["filtered"]) != 0 {
		t.Errorf("a record with tag Other reached the TagA handler %d time(s)", len(tries["filtered"]))
	}
	if got := tries["dlq"]; got[0] != 0 || got[1] != 1 {
		t.Errorf("reconsume times seen %v, want [0 1]", got)
	}
	if n := len(readTopic(t, brokers, DLQTopic("g-forged"))); n != 0 {
		t.Errorf("%d record(s) dead-lettered", n)
	}
	if n := cons.ForgedControlHeaders(); n != 3 {
		t.Errorf("ForgedControlHeaders = %d, want 3", n)
	}
}

// TestSignedControlHeadersHonoured: with Config.ControlHeaderKey, control headers on a
// main topic are honoured when SLUICE_HMAC under that key covers them (as a
// DelayForwarder with the key writes them), and ignored with any other key.
func TestSignedControlHeadersHonoured(t *testing.T) {
	c := newCluster(t, 1, "signed")
	brokers := c.ListenAddrs()
	ctx := ctxT(t, 30*time.Second)
	key := []byte("group-key")
	msgs := []kafkago.Message{
		{Topic: "signed", Value: []byte("good"), Headers: []kafkago.Header{{Key: HeaderBornMs, Value: []byte("1700000000000")}}},
		{Topic: "signed", Value: []byte("bad"), Headers: []kafkago.Header{{Key: HeaderBornMs, Value: []byte("1700000000000")}}},
		{Topic: "signed", Value: []byte("moved"), Headers: []kafkago.Header{{Key: HeaderBornMs, Value: []byte("1700000000000")}}},
	}
	signControl(key, &msgs[0])
	signControl([]byte("another-key"), &msgs[1])
	signControl(key, &msgs[2])
	msgs[2].Value = []byte("moved!") // the MAC covers the value: a copy with another body is not honoured
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), BatchTimeout: time.Millisecond, Transport: &kafkago.Transport{}}
	defer func() { _ = w.Close(); w.Transport.(*kafkago.Transport).CloseIdleConnections() }()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	var got seen
	cfg := fastConfig(t, brokers, "g-signed")
	cfg.ControlHeaderKey = key
	cons := startConsumer(t, cfg, func(c *Consumer) {
		if err := c.Subscribe("signed", "*", recordOK(&got)); err != nil {
			t.Fatal(err)
		}
	})
	defer shutdown(t, cons, 10*time.Second)
	testkit.WaitFor(t, 15*time.Second, func() bool { return got.len() == 3 }, "three records")
	for _, m := range got.all() {
		honoured := m.BornTimestamp == 1_700_000_000_000
		if honoured != (string(m.Body) == "good") || m.Property(HeaderHMAC) != "" {
			t.Errorf("%s: born %d, properties %v", m.Body, m.BornTimestamp, m.Properties)
		}
	}
	if n := cons.ForgedControlHeaders(); n != 2 {
		t.Errorf("ForgedControlHeaders = %d, want 2", n)
	}
}

// FuzzVerifyControl: the HMAC check of control headers never panics and accepts only
// what signControl produced for the same record.
func FuzzVerifyControl(f *testing.F) {
	f.Add([]byte("k"), "t", []byte("v"), HeaderDueMs, []byte("1"), []byte("00"))
	f.Fuzz(func(t *testing.T, key []byte, topic string, value []byte, hk string, hv, mac []byte) {
		hs := []kafkago.Header{{Key: hk, Value: hv}, {Key: HeaderHMAC, Value: mac}}
		if verifyControl(key, topic, nil, value, hs) {
			km := kafkago.Message{Topic: topic, Value: value, Headers: hs[:1:1]}
			signControl(key, &km)
			if string(km.Headers[len(km.Headers)-1].Value) != string(mac) {
				t.Fatalf("accepted a MAC signControl does not produce")
			}
		}
	})
}
