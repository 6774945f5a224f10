package kafkago

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startKafka(t *testing.T, topic string, partitions int32) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// readAll reads n records from every partition of topic (kafka-go Readers, one per
// partition, from the first offset).
func readAll(t *testing.T, addrs []string, topic string, partitions, n int) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []kafka.Message
	for p := 0; p < partitions && len(out) < n; p++ {
		conn, err := kafka.DialLeader(ctx, "tcp", addrs[0], topic, p)
		if err != nil {
			t.Fatal(err)
		}
		last, err := conn.ReadLastOffset()
		_ = conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if last == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: addrs, Topic: topic, Partition: p, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond})
		for i := int64(0); i < last; i++ {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				_ = r.Close()
				t.Fatalf("partition %d offset %d: %v", p, i, err)
			}
			out = append(out, m)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func header(m kafka.Message, name string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value), true
		}
	}
	return "", false
}

// Through the Keys middleware and SendFunc into an in-process Kafka (kfake): every record
// carries headers TAGS and KEYS (the caller's keys, or the MD5 content key), its other
// properties as headers, key = sharding key (one partition per key with a hash
// balancer), value = body.
func TestSendToKafka(t *testing.T) {
	const topic, partitions = "orders", 3
	addrs := startKafka(t, topic, partitions)
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond, Transport: &kafka.Transport{}}
	defer func() {
		if err := Component(w).Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	send := middleware.ChainSend(SendFunc(w), middleware.Keys())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 8
	ids := map[string]string{}
	for i := 0; i < n; i++ {
		m := message.NewMessage(topic, []byte("order-body-"+strconv.Itoa(i)))
		m.SetTag("Created").SetProperty("seq", strconv.Itoa(i)).SetShardingKey("customer-" + strconv.Itoa(i%2))
		m.Flag = 7
		if i%2 == 1 {
			m.SetKeys("order-"+strconv.Itoa(i), "customer-1")
		}
		res, err := send(ctx, m)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if res.Status != message.SendOK || res.MsgID == "" || res.Queue.Topic != topic {
			t.Fatalf("result %+v", res)
		}
		ids[strconv.Itoa(i)] = res.MsgID
	}
	recs := readAll(t, addrs, topic, partitions, n)
	if len(recs) != n {
		t.Fatalf("read %d records, want %d", len(recs), n)
	}
	partitionOf := map[string]int{}
	for _, r := range recs {
		seq, _ := header(r, "seq")
		i, _ := strconv.Atoi(seq)
		tags, okT := header(r, message.PropertyTags)
		keys, okK := header(r, message.PropertyKeys)
		uniq, _ := header(r, message.PropertyUniqClientMessageIDKeyIdx)
		flag, _ := header(r, HeaderFlag)
		wantKey := "customer-" + strconv.Itoa(i%2)
		wantKeys := middleware.ContentKey(message.NewMessage(topic, []byte("order-body-"+seq)).SetTag("Created"))
		if i%2 == 1 {
			wantKeys = "order-" + seq + " customer-1"
		}
		if !okT || tags != "Created" || !okK || keys != wantKeys || string(r.Key) != wantKey ||
			string(r.Value) != "order-body-"+seq || uniq != ids[seq] || flag != "7" {
			t.Fatalf("record %s: key %q value %q headers %v", seq, r.Key, r.Value, r.Headers)
		}
		if p, ok := partitionOf[wantKey]; ok && p != r.Partition {
			t.Fatalf("sharding key %s on partitions %d and %d", wantKey, p, r.Partition)
		}
		partitionOf[wantKey] = r.Partition
	}
	if !strings.HasPrefix(middleware.ContentKey(message.NewMessage(topic, []byte("x")).SetTag("Created")), "Created_") {
		t.Fatal("content key format")
	}
}

// What a plain Writer cannot do is a permanent *UnsupportedError, never a silent no-op;
// a topic other than the Writer's is refused; a Kafka that is down gives a retriable
// error.
func TestUnsupportedAndFailures(t *testing.T) {
	w := &kafka.Writer{Addr: kafka.TCP("127.0.0.1:1"), Topic: "bound", MaxAttempts: 1, WriteTimeout: time.Second,
		Transport: &kafka.Transport{}}
	defer func() { _ = Component(w).Shutdown(context.Background()) }()
	send := SendFunc(w)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cases := map[string]*message.Message{
		"delay": message.NewMessage("bound", []byte("x")).SetDelayLevel(3),
		"timer": message.NewMessage("bound", []byte("x")).SetProperty(redismw.PropertyTimerDeliverMs, "1800000000000"),
		"half":  message.NewMessage("bound", []byte("x")).SetProperty(message.PropertyTransactionPrepared, "true"),
		"topic": message.NewMessage("other", []byte("x")),
	}
	for name, m := range cases {
		_, err := send(ctx, m)
		var ue *UnsupportedError
		if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) || redismw.DefaultRetriable(err) {
			t.Errorf("%s: %v, want a permanent *UnsupportedError", name, err)
		}
	}
	_, err := send(ctx, message.NewMessage("bound", []byte("x")))
	if err == nil || !redismw.DefaultRetriable(err) || !strings.Contains(err.Error(), `kafkago: send to topic "bound"`) {
		t.Fatalf("send to a down Kafka: %v, want a wrapped retriable error", err)
	}
}
