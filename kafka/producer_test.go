package kafka

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/transport"
)

// Through the Keys middleware and the producer into kfake: every record carries headers
// TAGS and KEYS, its properties, key = sharding key (one partition per key with the
// Murmur2 balancer), value = body; the result names the partition and offset.
func TestProducerMapping(t *testing.T) {
	const topic, partitions = "orders", 3
	c := newCluster(t, partitions, topic)
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	send := middleware.ChainSend(p.SendFunc(), middleware.Keys())
	ctx := ctxT(t, 20*time.Second)
	const n = 8
	where := map[string]string{}
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
		if res.Status != message.SendOK || res.MsgID == "" || res.Queue.Topic != topic || res.QueueOffset < 0 || res.Queue.BrokerName != BrokerName {
			t.Fatalf("result %+v", res)
		}
		where[res.MsgID] = strconv.Itoa(int(res.Queue.QueueID)) + "@" + strconv.FormatInt(res.QueueOffset, 10)
	}
	recs := readTopic(t, brokers, topic)
	if len(recs) != n {
		t.Fatalf("read %d records, want %d", len(recs), n)
	}
	partitionOf := map[string]int{}
	for _, r := range recs {
		m := r.ToMessageExt()
		seq := m.Property("seq")
		i, _ := strconv.Atoi(seq)
		wantKeys := middleware.ContentKey(message.NewMessage(topic, []byte("order-body-"+seq)).SetTag("Created"))
		if i%2 == 1 {
			wantKeys = "order-" + seq + " customer-1"
		}
		wantKey := "customer-" + strconv.Itoa(i%2)
		if m.Tag() != "Created" || strings.Join(m.Keys(), " ") != wantKeys || string(r.Key) != wantKey || m.ShardingKey() != wantKey ||
			string(m.Body) != "order-body-"+seq || m.Flag != 7 || m.Topic != topic || m.QueueID != int32(r.Partition) || m.QueueOffset != r.Offset ||
			where[m.MsgID] != strconv.Itoa(r.Partition)+"@"+strconv.FormatInt(r.Offset, 10) || m.BornTimestamp == 0 || m.StoreTimestamp == 0 {
			t.Fatalf("record %s: key %q value %q headers %v → %+v", seq, r.Key, r.Value, r.Headers, m)
		}
		if p, ok := partitionOf[wantKey]; ok && p != r.Partition {
			t.Fatalf("sharding key %s on partitions %d and %d", wantKey, p, r.Partition)
		}
		partitionOf[wantKey] = r.Partition
	}
}

// What Kafka cannot do is a permanent *UnsupportedError, never a silent no-op; bad topic
// names and oversized bodies are typed errors; a Kafka that is down gives a wrapped,
// retriable error from Start; a send before Start fails with ErrNotStarted (also
// transport.ErrNotStarted); after Shutdown sends fail with ErrClosed.
func TestProducerRefusals(t *testing.T) {
	p, err := NewProducer(ProducerConfig{Brokers: []string{"127.0.0.1:1"}, MaxAttempts: 1, WriteTimeout: time.Second,
		DialTimeout: time.Second, MaxBodyBytes: 10, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	cases := map[string]*message.Message{
		"delay without DelayTopics": message.NewMessage("t", []byte("x")).SetDelayLevel(3),
		"timer":                     message.NewMessage("t", []byte("x")).SetProperty(message.PropertyTimerDeliverMs, "1800000000000"),
		"half":                      message.NewMessage("t", []byte("x")).SetProperty(message.PropertyTransactionPrepared, "true"),
	}
	for name, m := range cases {
		_, err := p.Send(ctx, m)
		var ue *UnsupportedError
		if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) || redismw.DefaultRetriable(err) {
			t.Errorf("%s: %v, want a permanent *UnsupportedError", name, err)
		}
	}
	if _, err := p.SendMessageInTransaction(ctx, message.NewMessage("t", []byte("x"))); !errors.Is(err, ErrUnsupported) {
		t.Errorf("transactional send: %v, want ErrUnsupported", err)
	}
	var ve *message.ValidationError
	if _, err := p.Send(ctx, message.NewMessage("bad%topic", []byte("x"))); !errors.As(err, &ve) || ve.Field != "topic" {
		t.Errorf("bad topic: %v", err)
	}
	if _, err := p.Send(ctx, message.NewMessage("t", []byte("01234567890"))); !errors.As(err, &ve) || ve.Field != "body" || ve.Limit != 10 {
		t.Errorf("big body: %v", err)
	}
	if _, err := p.Send(ctx, message.NewMessage("t", []byte("x"))); !errors.Is(err, ErrNotStarted) || !errors.Is(err, transport.ErrNotStarted) {
		t.Fatalf("send before Start: %v, want ErrNotStarted", err)
	}
	if err := p.SendAsync(ctx, message.NewMessage("t", []byte("x")), func(*message.SendResult, error) { t.Error("callback of a refused send ran") }); !errors.Is(err, transport.ErrNotStarted) {
		t.Fatalf("async send before Start: %v, want ErrNotStarted", err)
	}
	err = p.Start(ctx)
	if err == nil || !redismw.DefaultRetriable(err) || !strings.Contains(err.Error(), "kafka: start producer") {
		t.Fatalf("Start against a down Kafka: %v, want a wrapped retriable error", err)
	}
	if _, err := p.Send(ctx, message.NewMessage("t", []byte("x"))); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("send after a failed Start: %v, want ErrNotStarted", err)
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, message.NewMessage("t", []byte("x"))); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after shutdown: %v", err)
	}
	if err := p.SendAsync(ctx, message.NewMessage("t", []byte("x")), func(*message.SendResult, error) {}); !errors.Is(err, ErrClosed) || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("async send after shutdown: %v", err)
	}
	if err := p.Start(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after shutdown: %v, want ErrClosed", err)
	}
	for _, bad := range []ProducerConfig{{}, {Brokers: []string{"x:1"}, DelayLevels: []time.Duration{0}}} {
		var ce *config.Error
		if _, err := NewProducer(bad); !errors.As(err, &ce) {
			t.Errorf("config %+v: %v, want *config.Error", bad, err)
		}
	}
}

// Every asynchronous send's callback runs exactly once: with the partition and offset
// when stored, with an error when the cluster went away — also when Shutdown's deadline
// cut the connections first.
func TestProducerAsyncCompletions(t *testing.T) {
	const topic = "async"
	c := newCluster(t, 2, topic)
	p := newProducer(t, c.ListenAddrs(), nil)
	ctx := ctxT(t, 20*time.Second)
	const n = 200
	var mu sync.Mutex
	calls := map[string]int{}
	var failed int
	for i := 0; i < n; i++ {
		m := message.NewMessage(topic, []byte(strconv.Itoa(i))).SetKeys("k" + strconv.Itoa(i))
		if err := p.SendAsync(ctx, m, func(res *message.SendResult, err error) {
			mu.Lock()
			defer mu.Unlock()
			calls[m.Keys()[0]]++
			if err != nil || res.QueueOffset < 0 {
				failed++
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	shutdown(t, p, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != n || failed != 0 {
		t.Fatalf("%d callbacks (want %d), %d failed", len(calls), n, failed)
	}
	for k, v := range calls {
		if v != 1 {
			t.Fatalf("callback of %s ran %d times", k, v)
		}
	}
	if got := len(readTopic(t, c.ListenAddrs(), topic)); got != n {
		t.Fatalf("%d records stored, want %d", got, n)
	}

	// A cluster that is gone: Shutdown's deadline passes, callbacks still all run (with errors).
	c2 := newCluster(t, 1, topic)
	p2, err := NewProducer(ProducerConfig{Brokers: c2.ListenAddrs(), WriteTimeout: 30 * time.Second, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Send(ctx, message.NewMessage(topic, []byte("warm"))); err != nil {
		t.Fatal(err)
	}
	c2.Control(func(kmsg.Request) (kmsg.Response, error, bool) { // swallow every request
		c2.KeepControl()
		return nil, nil, true
	})
	var ran sync.WaitGroup
	var errs, oks int
	for i := 0; i < 20; i++ {
		ran.Add(1)
		if err := p2.SendAsync(ctx, message.NewMessage(topic, []byte("x")), func(res *message.SendResult, err error) {
			mu.Lock()
			if err != nil {
				errs++
			} else {
				oks++
			}
			mu.Unlock()
			ran.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	start := time.Now()
	err = p2.Shutdown(sctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Fatalf("shutdown against a silent cluster: %v after %v", err, time.Since(start))
	}
	mu.Unlock()
	ran.Wait()
	mu.Lock()
	if errs+oks != 20 || errs == 0 {
		t.Fatalf("callbacks: %d errors, %d successes", errs, oks)
	}
}

// Errors name what really failed. A body over kafka-go's 1 MiB record limit (below the
// 4 MiB MaxBodyBytes default) is a *message.ValidationError with the limit, not
// kafka-go's MessageTooLargeError, whose text blames the broker's configuration; a
// delayed send whose delay topic is missing names that topic, not only the real one.
func TestProducerErrorsNameTheLimitAndDelayTopic(t *testing.T) {
	c := newCluster(t, 1, "t")
	p := newProducer(t, c.ListenAddrs(), func(cfg *ProducerConfig) { cfg.DelayTopics = true })
	ctx := ctxT(t, 20*time.Second)
	big := message.NewMessage("t", make([]byte, maxRecordBytes+1))
	var ve *message.ValidationError
	if _, err := p.Send(ctx, big); !errors.As(err, &ve) || ve.Field != "body" || ve.Limit != maxRecordBytes || ve.Value <= maxRecordBytes {
		t.Errorf("sync send of a %d-byte body: %v, want a *message.ValidationError with limit %d", len(big.Body), err, maxRecordBytes)
	}
	if err := p.SendAsync(ctx, big, func(*message.SendResult, error) { t.Error("callback of a refused async send ran") }); !errors.As(err, &ve) || ve.Limit != maxRecordBytes {
		t.Errorf("async send of a %d-byte body: %v, want a *message.ValidationError", len(big.Body), err)
	}
	_, err := p.Send(ctx, message.NewMessage("t", []byte("x")).SetDelayLevel(2))
	if err == nil || !strings.Contains(err.Error(), `"`+DelayTopic(2)+`"`) {
		t.Errorf("delayed send without its delay topic: %v, want an error naming %q", err, DelayTopic(2))
	}
}

// A property named like a header the consumer acts on is refused at send. Before, a
// user's SLUICE_DUE_MS an hour ahead was sent and then held its whole partition for the
// hour (every later message waited behind it).
func TestProducerRefusesReservedHeaders(t *testing.T) {
	p, err := NewProducer(ProducerConfig{Brokers: []string{"127.0.0.1:1"}, MaxAttempts: 1, WriteTimeout: time.Second,
		DialTimeout: time.Second, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	defer func() { _ = p.Shutdown(ctx) }()
	for _, name := range []string{HeaderDueMs, HeaderReconsumeTimes, HeaderOriginTopic, HeaderFlag} {
		m := message.NewMessage("t", []byte("x")).SetProperty(name, "4102444800000")
		var ve *message.ValidationError
		if _, err := p.Send(ctx, m); !errors.As(err, &ve) || ve.Field != "properties" || !strings.Contains(err.Error(), name) {
			t.Errorf("send with property %s: %v, want a *message.ValidationError naming it", name, err)
		}
		if err := p.SendAsync(ctx, m, func(*message.SendResult, error) { t.Error("callback of a refused send ran") }); !errors.As(err, &ve) {
			t.Errorf("async send with property %s: %v, want a *message.ValidationError", name, err)
		}
	}
}

// A sharding key lands on the partition the Java client's Murmur2 hash picks — the one
// kafka-go's Murmur2Balancer picks too, so keys keep their partitions across the move
// from kafka-go to franz-go. A kafka-go Balancer in the config is asked instead.
func TestProducerKeyPartitions(t *testing.T) {
	const topic, partitions = "keyed", 8
	c := newCluster(t, partitions, topic)
	p := newProducer(t, c.ListenAddrs(), nil)
	ctx := ctxT(t, 20*time.Second)
	all := make([]int, partitions)
	for i := range all {
		all[i] = i
	}
	used := map[int]bool{}
	for i := 0; i < 64; i++ {
		key := "customer-" + strconv.Itoa(i)
		res, err := p.Send(ctx, message.NewMessage(topic, []byte("x")).SetShardingKey(key))
		if err != nil {
			t.Fatal(err)
		}
		want := kafkago.Murmur2Balancer{}.Balance(kafkago.Message{Key: []byte(key)}, all...)
		if int(res.Queue.QueueID) != want {
			t.Fatalf("key %s on partition %d, Murmur2 says %d", key, res.Queue.QueueID, want)
		}
		used[res.Queue.QueueID] = true
	}
	if len(used) < partitions/2 {
		t.Fatalf("64 keys used only partitions %v", used)
	}

	// A trickle of keyless sends spreads (each is a batch of its own), so every
	// consumer of a group gets work; a partitioner filling one partition with 64 KiB
	// first would put all 40 on one.
	keyless := map[int]bool{}
	for i := 0; i < 40; i++ {
		res, err := p.Send(ctx, message.NewMessage(topic, []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		keyless[res.Queue.QueueID] = true
	}
	if len(keyless) < 2 {
		t.Fatalf("40 keyless sends one after another all went to partitions %v", keyless)
	}

	last := newProducer(t, c.ListenAddrs(), func(cfg *ProducerConfig) {
		cfg.Balancer = kafkago.BalancerFunc(func(_ kafkago.Message, parts ...int) int { return parts[len(parts)-1] })
	})
	for i := 0; i < 5; i++ {
		res, err := last.Send(ctx, message.NewMessage(topic, []byte("x")).SetShardingKey("k"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		if res.Queue.QueueID != partitions-1 {
			t.Fatalf("balancer picking the last partition: record on %d", res.Queue.QueueID)
		}
	}
}

// Waits are bounded by the caller's context: a SendAsync waiting for room (one record
// buffered, the cluster answering nothing) returns ctx's error and its callback never
// runs; a Send waiting for its acknowledgement returns ctx's error. Shutdown still runs
// the queued record's callback, once, with an error.
func TestProducerWaitsEndWithContext(t *testing.T) {
	const topic = "stuck"
	c := newCluster(t, 1, topic)
	p, err := NewProducer(ProducerConfig{Brokers: c.ListenAddrs(), MaxBufferedRecords: 1, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Second)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, message.NewMessage(topic, []byte("warm"))); err != nil {
		t.Fatal(err)
	}
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) { // swallow every request
		c.KeepControl()
		return nil, nil, true
	})
	var mu sync.Mutex
	var calls int
	var callErr error
	if err := p.SendAsync(ctx, message.NewMessage(topic, []byte("first")), func(_ *message.SendResult, err error) {
		mu.Lock()
		calls++
		callErr = err
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = p.SendAsync(short, message.NewMessage(topic, []byte("second")), func(*message.SendResult, error) { t.Error("callback of a send that found no room ran") })
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SendAsync without room: %v, want context.DeadlineExceeded", err)
	}
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err = p.Send(short, message.NewMessage(topic, []byte("sync")))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("Send to a silent cluster: %v after %v, want context.DeadlineExceeded", err, time.Since(start))
	}
	sctx, scancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = p.Shutdown(sctx)
	scancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown against a silent cluster: %v", err)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return calls > 0 }, "the queued send's callback")
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 || callErr == nil {
		t.Fatalf("queued send's callback: %d calls, error %v", calls, callErr)
	}
}

// A SendAsync callback may send again, synchronously or not, without waiting on itself
// (franz-go runs callbacks one at a time; Send uses the other client). Every follow-up
// is stored.
func TestProducerSendFromCallback(t *testing.T) {
	const topic, n = "chain", 50
	c := newCluster(t, 2, topic)
	p := newProducer(t, c.ListenAddrs(), func(cfg *ProducerConfig) { cfg.MaxBufferedRecords = 4 })
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for i := 0; i < n; i++ {
		wg.Add(1)
		if err := p.SendAsync(ctx, message.NewMessage(topic, []byte("a"+strconv.Itoa(i))), func(_ *message.SendResult, err error) {
			defer wg.Done()
			if err != nil {
				fail(err)
				return
			}
			if _, err := p.Send(ctx, message.NewMessage(topic, []byte("s"+strconv.Itoa(i)))); err != nil {
				fail(err)
			}
			wg.Add(1)
			if err := p.SendAsync(ctx, message.NewMessage(topic, []byte("b"+strconv.Itoa(i))), func(_ *message.SendResult, err error) {
				defer wg.Done()
				if err != nil {
					fail(err)
				}
			}); err != nil {
				wg.Done()
				fail(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d sends failed, first: %v", len(errs), errs[0])
	}
	if got := len(readTopic(t, c.ListenAddrs(), topic)); got != 3*n {
		t.Fatalf("%d records stored, want %d", got, 3*n)
	}
}

// The settings franz-go takes are checked, each error naming its field; RequireOne
// (the leader only, idempotence off) and every codec send and read back.
func TestProducerSettings(t *testing.T) {
	for field, bad := range map[string]ProducerConfig{
		"BatchBytes":         {Brokers: []string{"x:1"}, BatchBytes: 100},
		"Compression":        {Brokers: []string{"x:1"}, Compression: "brotli"},
		"MaxBufferedRecords": {Brokers: []string{"x:1"}, MaxBufferedRecords: -1},
	} {
		var ce *config.Error
		if _, err := NewProducer(bad); !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: %v, want a *config.Error naming it", field, err)
		}
	}
	const topic = "codecs"
	c := newCluster(t, 1, topic)
	ctx := ctxT(t, 30*time.Second)
	codecs := []string{"none", "gzip", "snappy", "lz4", "zstd"}
	for _, codec := range codecs {
		p := newProducer(t, c.ListenAddrs(), func(cfg *ProducerConfig) {
			cfg.Compression = codec
			cfg.RequiredAcks = kafkago.RequireOne
		})
		if _, err := p.Send(ctx, message.NewMessage(topic, []byte(strings.Repeat(codec, 100))).SetTag(codec)); err != nil {
			t.Fatalf("%s: %v", codec, err)
		}
	}
	recs := readTopic(t, c.ListenAddrs(), topic)
	if len(recs) != len(codecs) {
		t.Fatalf("%d records, want %d", len(recs), len(codecs))
	}
	for _, r := range recs {
		m := r.ToMessageExt()
		if string(m.Body) != strings.Repeat(m.Tag(), 100) {
			t.Fatalf("record tagged %s reads back as %.20q…", m.Tag(), m.Body)
		}
	}
}
