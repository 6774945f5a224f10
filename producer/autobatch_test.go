package producer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// outcomes records every callback of async sends by a test key: how often it ran and
// with what.
type outcomes struct {
	mu    sync.Mutex
	calls map[string]int
	res   map[string]*message.SendResult
	errs  map[string]error
	wg    sync.WaitGroup
}

func newOutcomes() *outcomes {
	return &outcomes{calls: map[string]int{}, res: map[string]*message.SendResult{}, errs: map[string]error{}}
}

// send starts an async send of m under key; a SendAsync error fails the test.
func (o *outcomes) send(t *testing.T, p *Producer, key string, m *message.Message) {
	t.Helper()
	o.wg.Add(1)
	err := p.SendAsync(context.Background(), m, func(r *message.SendResult, err error) {
		o.mu.Lock()
		o.calls[key]++
		o.res[key], o.errs[key] = r, err
		o.mu.Unlock()
		o.wg.Done()
	})
	if err != nil {
		o.wg.Done()
		t.Fatalf("SendAsync %s: %v", key, err)
	}
}

func (o *outcomes) wait(t *testing.T) {
	t.Helper()
	waitGroupWithin(t, &o.wg, 60*time.Second, "async callbacks")
}

// pullAll reads queues 0..n-1 of topic from offset 0 up to their max offsets.
func pullAll(t *testing.T, addr, topic string, n int) [][]*message.MessageExt {
	t.Helper()
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	max := maxOffsets(t, addr, topic, n)
	out := make([][]*message.MessageExt, n)
	ctx := testkit.Context(t, 30*time.Second)
	for q := 0; q < n; q++ {
		for off := int64(0); off < max[q]; {
			msgs, next, err := pull(ctx, rc, addr, "autobatch_test", topic, q, off)
			if err != nil {
				t.Fatalf("pull %s/%d at %d: %v", topic, q, off, err)
			}
			if next <= off {
				t.Fatalf("pull %s/%d at %d: no progress", topic, q, off)
			}
			out[q] = append(out[q], msgs...)
			off = next
		}
	}
	return out
}

// TestAutoBatchEachRecordItsOwnResult: 3,000 async sends (one goroutine, round robin
// over 4 queues) with AutoBatch on, mixing batchable records with ones that must go alone
// (compressed bodies, bodies over AutoBatchMaxBytes, another topic). Every callback runs
// once without error; pulling every queue back, the message at each result's queue and
// queue offset is that send's (body, UNIQ_KEY, offset message id); records coalesced into
// batches; and each queue holds its records in send order.
func TestAutoBatchEachRecordItsOwnResult(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	const topic, other, queues, n = "AutoBatch", "AutoBatchOther", 4, 3000
	createTopic(t, testbroker.Namesrv(b), topic, queues)
	createTopic(t, testbroker.Namesrv(b), other, queues)
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), AutoBatch: true, AutoBatchMaxBytes: 2048,
		MaxAsyncInflight: 512, SendTimeout: 20 * time.Second})
	ctx := testkit.Context(t, 60*time.Second)
	for _, tp := range []string{topic, other} { // routes cached: SendAsync queues in call order
		if _, err := p.SendSync(ctx, message.NewMessage(tp, []byte("warm-up"))); err != nil {
			t.Fatal(err)
		}
	}
	o := newOutcomes()
	bodies := map[string][]byte{}
	topics := map[string]string{}
	for i := 0; i < n; i++ {
		size := 100 + i%50
		switch {
		case i%97 == 0:
			size = 6000 // compressed: alone
		case i%89 == 0:
			size = 3000 // over AutoBatchMaxBytes, below the compression threshold: alone
		}
		tp := topic
		if i%13 == 0 {
			tp = other
		}
		body := testkit.SeqBody(i, size, 7)
		key := strconv.Itoa(i)
		m := message.NewMessage(tp, body)
		m.SetProperty("seq", key)
		if i%3 == 0 {
			m.SetTag("t" + strconv.Itoa(i%5)).SetKeys("k" + key)
		}
		bodies[key], topics[key] = body, tp
		o.send(t, p, key, m)
	}
	o.wait(t)

	stored := map[string]map[string]*message.MessageExt{} // topic → "queue/offset" → message
	for _, tp := range []string{topic, other} {
		stored[tp] = map[string]*message.MessageExt{}
		for q, msgs := range pullAll(t, b.Addr(), tp, queues) {
			last := -1
			for _, m := range msgs {
				stored[tp][fmt.Sprintf("%d/%d", q, m.QueueOffset)] = m
				if m.Property("seq") == "" {
					continue // the warm-up send
				}
				seq, _ := strconv.Atoi(m.Property("seq"))
				if seq <= last {
					t.Fatalf("%s queue %d: seq %d stored after %d", tp, q, seq, last)
				}
				last = seq
			}
		}
	}
	total := 0
	for _, s := range stored {
		total += len(s)
	}
	if total != n+2 {
		t.Fatalf("%d messages stored, want %d", total, n+2)
	}
	for i := 0; i < n; i++ {
		key := strconv.Itoa(i)
		if o.calls[key] != 1 || o.errs[key] != nil {
			t.Fatalf("send %s: %d callbacks, error %v", key, o.calls[key], o.errs[key])
		}
		r := o.res[key]
		m := stored[topics[key]][fmt.Sprintf("%d/%d", r.Queue.QueueID, r.QueueOffset)]
		switch {
		case m == nil:
			t.Fatalf("send %s: nothing stored at %s offset %d", key, r.Queue, r.QueueOffset)
		case m.Property("seq") != key || !bytes.Equal(m.Body, bodies[key]):
			t.Fatalf("send %s: result names %s offset %d, which holds seq %s", key, r.Queue, r.QueueOffset, m.Property("seq"))
		case r.MsgID != m.Property(message.PropertyUniqClientMessageIDKeyIdx) || r.OffsetMsgID != m.OffsetMsgID:
			t.Fatalf("send %s: ids %s/%s, stored %s/%s", key, r.MsgID, r.OffsetMsgID, m.Property(message.PropertyUniqClientMessageIDKeyIdx), m.OffsetMsgID)
		case r.Status != message.SendOK || r.Queue.Topic != topics[key]:
			t.Fatalf("send %s: result %+v", key, r)
		}
	}
	batches, records := p.batcher.batches.Load(), p.batcher.batchedRecords.Load()
	t.Logf("%d sends, %d went in %d batches", n, records, batches)
	if batches == 0 || records < n/4 {
		t.Fatalf("%d records in %d batches: little coalescing", records, batches)
	}
}

// TestAutoBatchRefusedBatch: a broker with ACL refuses every send of an account without
// PUB permission on the topic (SYSTEM_ERROR, retryable). With AutoBatch on, records
// coalesce into batches; every callback gets the refusal exactly once, after the three
// attempts of the async retry policy, and nothing is stored.
func TestAutoBatchRefusedBatch(t *testing.T) {
	aclFile := filepath.Join(t.TempDir(), "plain_acl.yml")
	acl := "accounts:\n  - accessKey: adminKey\n    secretKey: adminSecret\n    admin: true\n" +
		"  - accessKey: narrowKey\n    secretKey: narrowSecret\n    defaultTopicPerm: DENY\n    defaultGroupPerm: DENY\n    topicPerms: [Mine=PUB]\n"
	if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ := testbroker.Start(t, broker.Config{AclEnable: true, AclFile: aclFile, AccessKey: "adminKey", SecretKey: "adminSecret"})
	adm, err := admin.New(admin.Config{NamesrvAddrs: testbroker.Namesrv(b), Logger: quiet,
		Credentials: remoting.Credentials{AccessKey: "adminKey", SecretKey: "adminSecret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx := testkit.Context(t, 60*time.Second)
	for _, topic := range []string{"Orders", "Mine"} {
		if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := adm.WaitTopicRoute(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), AutoBatch: true,
		Credentials: remoting.Credentials{AccessKey: "narrowKey", SecretKey: "narrowSecret"}})
	if _, err := p.SendSync(ctx, message.NewMessage("Mine", []byte("allowed"))); err != nil {
		t.Fatalf("send to a topic the account may write: %v", err)
	}
	if _, err := p.SendSync(ctx, message.NewMessage("Orders", []byte("refused"))); err == nil {
		t.Fatal("the broker let the account write Orders")
	}
	const n = 200
	o := newOutcomes()
	for i := 0; i < n; i++ {
		o.send(t, p, strconv.Itoa(i), message.NewMessage("Orders", []byte("refused "+strconv.Itoa(i))))
	}
	o.wait(t)
	for i := 0; i < n; i++ {
		key := strconv.Itoa(i)
		var se *SendError
		if o.calls[key] != 1 || o.res[key] != nil || !errors.As(o.errs[key], &se) {
			t.Fatalf("send %s: %d callbacks, result %v, error %v", key, o.calls[key], o.res[key], o.errs[key])
		}
		var re *remoting.ResponseError
		if !errors.As(se, &re) || re.Code != remoting.SystemError || se.Attempts != 3 || se.Topic != "Orders" || se.BrokerAddr != b.Addr() {
			t.Fatalf("send %s: %#v, want SYSTEM_ERROR after 3 attempts at %s", key, se, b.Addr())
		}
	}
	if p.batcher.batches.Load() == 0 {
		t.Fatal("no batch was sent: the test did not exercise a refused batch")
	}
	if off := maxOffsets(t, b.Addr(), "Orders", 1); off[0] != 0 {
		t.Fatalf("%d messages stored in Orders", off[0])
	}
}

// TestAutoBatchShutdownMidLinger: with a linger of 1s, records wait for their batch;
// Shutdown sends them at once and returns after every callback ran, every record stored.
// Without the flush Shutdown would wait for the linger timer: it returns well within it
// (typically in tens of milliseconds, against 1s).
func TestAutoBatchShutdownMidLinger(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	const topic, n = "AutoBatchLinger", 100
	createTopic(t, testbroker.Namesrv(b), topic, 2)
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), AutoBatch: true, AutoBatchLinger: MaxAutoBatchLinger})
	ctx := testkit.Context(t, 60*time.Second)
	if _, err := p.SendSync(ctx, message.NewMessage(topic, []byte("warm-up"))); err != nil {
		t.Fatal(err)
	}
	o := newOutcomes()
	start := time.Now()
	for i := 0; i < n; i++ {
		o.send(t, p, strconv.Itoa(i), message.NewMessage(topic, []byte("lingering "+strconv.Itoa(i))))
	}
	o.mu.Lock()
	early := len(o.calls)
	o.mu.Unlock()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= MaxAutoBatchLinger {
		t.Fatalf("Shutdown returned %v after the first send: it waited for the linger", took)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := 0; i < n; i++ {
		key := strconv.Itoa(i)
		if o.calls[key] != 1 || o.errs[key] != nil {
			t.Fatalf("send %s after Shutdown: %d callbacks, error %v", key, o.calls[key], o.errs[key])
		}
	}
	if off := maxOffsets(t, b.Addr(), topic, 2); sum(off) != n+1 {
		t.Fatalf("%v stored, want %d", off, n+1)
	}
	t.Logf("%d of %d callbacks ran before Shutdown", early, n)
}

// TestAutoBatchContextEndsWhileWaiting: a record whose context ends while it lingers
// fails with that error; the others of its queue are stored.
func TestAutoBatchContextEndsWhileWaiting(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	const topic = "AutoBatchCtx"
	createTopic(t, testbroker.Namesrv(b), topic, 1)
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), AutoBatch: true, AutoBatchLinger: 200 * time.Millisecond})
	ctx := testkit.Context(t, 60*time.Second)
	if _, err := p.SendSync(ctx, message.NewMessage(topic, []byte("warm-up"))); err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(ctx)
	results := make(chan AsyncResult, 3)
	send := func(c context.Context, body string) {
		if err := p.SendAsync(c, message.NewMessage(topic, []byte(body)), func(r *message.SendResult, err error) {
			results <- AsyncResult{r, err}
		}); err != nil {
			t.Fatal(err)
		}
	}
	send(ctx, "a")
	send(gone, "b")
	cancel()
	send(ctx, "c")
	var ok, canceled int
	for range 3 {
		select {
		case r := <-results:
			switch {
			case r.Err == nil:
				ok++
			case errors.Is(r.Err, context.Canceled):
				canceled++
			default:
				t.Fatalf("unexpected error %v", r.Err)
			}
		case <-ctx.Done():
			t.Fatal("callbacks missing")
		}
	}
	if ok != 2 || canceled != 1 {
		t.Fatalf("%d stored, %d canceled", ok, canceled)
	}
	if off := maxOffsets(t, b.Addr(), topic, 1); off[0] != 3 {
		t.Fatalf("max offset %d, want 3", off[0])
	}
}

// TestAutoBatchBatchable: which prepared sends may share a request.
func TestAutoBatchBatchable(t *testing.T) {
	p, err := New(Config{NamesrvAddrs: []string{"127.0.0.1:9876"}, AutoBatch: true, AutoBatchMaxBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		msg  *message.Message
		want bool
	}{
		{"plain", message.NewMessage("T", []byte("x")), true},
		{"tags and keys", message.NewMessage("T", []byte("x")).SetTag("a").SetKeys("k"), true},
		{"compressed", message.NewMessage("T", bytes.Repeat([]byte("z"), 5000)), false},
		{"over AutoBatchMaxBytes", message.NewMessage("T", make([]byte, 1010)), false},
		{"delay level", message.NewMessage("T", []byte("x")).SetDelayLevel(2), false},
		{"timer", message.NewMessage("T", []byte("x")).SetProperty(message.PropertyTimerDelayMs, "500"), false},
		{"transactional", message.NewMessage("T", []byte("x")).SetProperty(message.PropertyTransactionPrepared, "true"), false},
		{"retry topic", message.NewMessage("%RETRY%G", []byte("x")), false},
	}
	for _, c := range cases {
		pr, err := p.prepareSingle(c.msg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := p.batcher.batchable(pr); got != c.want {
			t.Errorf("%s: batchable %v, want %v", c.name, got, c.want)
		}
		pr.release()
	}
}

// TestAutoBatchConfig: the settings' defaults, and a *config.Error naming the field and
// the limit for each bad value.
func TestAutoBatchConfig(t *testing.T) {
	ns := []string{"127.0.0.1:9876"}
	p, err := New(Config{NamesrvAddrs: ns})
	if err != nil {
		t.Fatal(err)
	}
	if p.batcher != nil || p.cfg.AutoBatchMaxCount != DefaultAutoBatchMaxCount || p.cfg.AutoBatchMaxBytes != DefaultAutoBatchMaxBytes || p.cfg.AutoBatchLinger != 0 {
		t.Fatalf("defaults: batcher %v, %+v", p.batcher, p.cfg)
	}
	p, err = New(Config{NamesrvAddrs: ns, AutoBatch: true, MaxMessageSize: 1000})
	if err != nil || p.cfg.AutoBatchMaxBytes != 1000 {
		t.Fatalf("AutoBatchMaxBytes default under a small MaxMessageSize: %v %d", err, p.cfg.AutoBatchMaxBytes)
	}
	bad := []struct {
		cfg   Config
		field string
		limit any
	}{
		{Config{AutoBatchLinger: -time.Millisecond}, "AutoBatchLinger", time.Duration(0)},
		{Config{AutoBatchLinger: 2 * time.Second}, "AutoBatchLinger", MaxAutoBatchLinger},
		{Config{AutoBatchMaxCount: -1}, "AutoBatchMaxCount", 0},
		{Config{AutoBatchMaxCount: MaxAutoBatchCount + 1}, "AutoBatchMaxCount", MaxAutoBatchCount},
		{Config{AutoBatchMaxBytes: -1}, "AutoBatchMaxBytes", 0},
		{Config{AutoBatchMaxBytes: DefaultMaxMessageSize + 1}, "AutoBatchMaxBytes", DefaultMaxMessageSize},
		{Config{AutoBatchMaxBytes: 2000, MaxMessageSize: 1999}, "AutoBatchMaxBytes", 1999},
	}
	for _, c := range bad {
		c.cfg.NamesrvAddrs = ns
		_, err := New(c.cfg)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(ce.Reason, fmt.Sprintf("(limit %v)", c.limit)) {
			t.Errorf("%+v: %v, want a *config.Error for %s with limit %v", c.cfg, err, c.field, c.limit)
		}
	}
}

// TestAutoBatchRetriedBatch: a fake broker holds the answer to the first (lone) send
// until 99 more records were handed to SendAsync, refuses the batch they then form once
// with SYSTEM_BUSY (2, retryable) and stores it on the retry. Every record's callback
// runs once, with its own queue offset (the batch's first + its index) and its own
// offset message id from the answer's comma-joined list, in send order.
func TestAutoBatchRetriedBatch(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	next := int64(0)     // the fake queue's next offset
	var batchSizes []int // records of each batch request, refused or not
	store := func(req *remoting.RemotingCommand, n int) *remoting.RemotingCommand {
		mu.Lock()
		defer mu.Unlock()
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("ID%d", next+int64(i))
		}
		r := remoting.NewResponse(remoting.Success, "")
		r.SetExt("msgId", strings.Join(ids, ",")).SetExt("queueId", req.ExtFields["e"]).SetExt("queueOffset", strconv.FormatInt(next, 10))
		next += int64(n)
		return r
	}
	hs := brokerHandlers(func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		if string(req.Body) == "0" {
			<-release
		}
		return store(req, 1)
	})
	hs[remoting.SendBatchMessage] = func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		items, err := message.DecodeBatch(req.Body)
		if err != nil {
			return remoting.NewResponse(remoting.MessageIllegal, err.Error())
		}
		mu.Lock()
		batchSizes = append(batchSizes, len(items))
		first := len(batchSizes) == 1
		mu.Unlock()
		if first {
			return remoting.NewResponse(remoting.SystemBusy, "busy, try again")
		}
		return store(req, len(items))
	}
	b := fakeremote.Start(t, hs)
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, AutoBatch: true})
	ctx := testkit.Context(t, 30*time.Second)
	if _, err := p.publishQueues(ctx, "T"); err != nil { // the route cached: SendAsync queues in call order
		t.Fatal(err)
	}
	const n = 100
	o := newOutcomes()
	for i := 0; i < n; i++ {
		o.send(t, p, strconv.Itoa(i), message.NewMessage("T", []byte(strconv.Itoa(i))))
	}
	close(release)
	o.wait(t)
	for i := 0; i < n; i++ {
		key := strconv.Itoa(i)
		r := o.res[key]
		if o.calls[key] != 1 || o.errs[key] != nil || r == nil {
			t.Fatalf("send %d: %d callbacks, error %v", i, o.calls[key], o.errs[key])
		}
		if r.QueueOffset != int64(i) || r.OffsetMsgID != "ID"+key || r.MsgID == "" || r.Queue.QueueID != 0 {
			t.Fatalf("send %d: result %+v, want queue offset %d and offset id ID%d", i, r, i, i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(batchSizes) != 2 || batchSizes[0] != n-1 || batchSizes[1] != n-1 {
		t.Fatalf("batch requests of %v records, want [%d %d] (refused, then retried)", batchSizes, n-1, n-1)
	}
}
