package producer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// sentRecord is what one send's SendResult said, kept to compare with what a pull reads.
type sentRecord struct {
	body   []byte
	result message.SendResult
}

// TestPooledSendsMatchWhatIsPulled: the recycled per-send state (prepared sends, async
// attempts' callbacks, interned and copied response header strings, list-form send
// responses, recycled frames) never mixes sends. Several producers of one process send
// at once to a real broker over TCP, async (with a small MaxAsyncInflight, so sends wait
// for room) and sync, messages without properties (the one-allocation UNIQ_KEY path),
// with keys and tags, with a UNIQ_KEY of their own, and compressed bodies; every
// callback runs exactly once with its own message's id. A PullConsumer then reads
// everything back (producers and consumer with binary headers, then with JSON ones), and another burst of sends churns the pools
// before anything is compared: every pulled message is the one its SendResult named
// (same body, UNIQ_KEY, offset message id, queue and queue offset), every send is
// pulled exactly once, and neither the kept SendResults nor the kept messages changed
// under the later traffic.
func TestPooledSendsMatchWhatIsPulled(t *testing.T) {
	for _, jsonHeaders := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonHeaders), func(t *testing.T) { pooledSendsMatchPulls(t, jsonHeaders) })
	}
}

func pooledSendsMatchPulls(t *testing.T, jsonHeaders bool) {
	b, _ := testbroker.Start(t, broker.Config{})
	const topic, queues = "PooledSends", 4
	createTopic(t, testbroker.Namesrv(b), topic, queues)
	const producers, perProducer = 3, 200
	var (
		mu   sync.Mutex
		sent = map[string]sentRecord{} // by UNIQ_KEY
		bad  []string
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		bad = append(bad, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	record := func(body []byte, r *message.SendResult) {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := sent[r.MsgID]; dup {
			bad = append(bad, "two sends reported msgId "+r.MsgID)
		}
		sent[r.MsgID] = sentRecord{body: body, result: *r}
	}
	msg := func(pi, i int) (*message.Message, []byte) {
		size := 64 + i%7
		if i%11 == 0 {
			size = 6000 // compressed (over CompressMsgBodyOverHowmuch)
		}
		body := testkit.SeqBody(pi*100000+i, size, uint64(pi))
		m := message.NewMessage(topic, body)
		switch i % 4 {
		case 1:
			m.SetKeys("k" + strconv.Itoa(i))
			m.SetTag("t" + strconv.Itoa(i%3))
		case 2:
			m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, fmt.Sprintf("OWN%02d%06d", pi, i))
		}
		return m, body
	}
	ps := make([]*Producer, producers)
	for pi := range ps {
		ps[pi] = newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), MaxAsyncInflight: 8, SendTimeout: 10 * time.Second, JSONHeaders: jsonHeaders})
	}
	// burst sends perProducer messages from each producer (2 goroutines each), calling
	// keep with each stored send's body and result.
	burst := func(round int, keep func([]byte, *message.SendResult)) {
		var senders, pending sync.WaitGroup
		for pi, p := range ps {
			for g := range 2 {
				senders.Add(1)
				go func() {
					defer senders.Done()
					for i := g; i < perProducer; i += 2 {
						m, body := msg(round*producers+pi, i)
						if i%5 == 0 {
							r, err := p.SendSync(context.Background(), m)
							if err != nil {
								fail("sync send %d/%d: %v", pi, i, err)
							} else if r.MsgID != m.UniqKey() {
								fail("sync send %d/%d: result for %s, message %s", pi, i, r.MsgID, m.UniqKey())
							} else {
								keep(body, r)
							}
							continue
						}
						err := sendAsyncOnce(p, m, &pending, fail, fmt.Sprintf("async send %d/%d", pi, i), func(r *message.SendResult, err error) {
							switch {
							case err != nil:
								fail("async send %d/%d: %v", pi, i, err)
							case r.MsgID != m.UniqKey():
								fail("async send %d/%d: result for %s, message %s", pi, i, r.MsgID, m.UniqKey())
							default:
								keep(body, r)
							}
						})
						if err != nil {
							fail("async send %d/%d: %v", pi, i, err)
						}
					}
				}()
			}
		}
		waitGroupWithin(t, &senders, 30*time.Second, "senders")
		waitGroupWithin(t, &pending, 30*time.Second, "async callbacks")
	}
	burst(0, record)
	mu.Lock()
	for _, s := range bad {
		t.Error(s)
	}
	n := len(sent)
	mu.Unlock()
	if t.Failed() {
		t.FailNow()
	}
	if n != producers*perProducer {
		t.Fatalf("%d sends stored, want %d", n, producers*perProducer)
	}

	pc, err := consumer.NewPullConsumer(consumer.PullConfig{NamesrvAddrs: testbroker.Namesrv(b), Group: "PooledSendsCheck", Logger: quiet, JSONHeaders: jsonHeaders})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = pc.Shutdown(ctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mqs, err := pc.MessageQueues(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var pulled []*message.MessageExt
	for _, mq := range mqs {
		for off, rounds := int64(0), 0; rounds < 1000; rounds++ {
			res, err := pc.Pull(ctx, consumer.PullRequest{Queue: mq, Offset: off})
			if err != nil {
				t.Fatalf("pull %v at %d: %v", mq, off, err)
			}
			if len(res.Messages) == 0 {
				break
			}
			pulled = append(pulled, res.Messages...)
			off = res.NextBeginOffset
		}
	}
	// Churn: another burst of sends (their body-less responses and written requests
	// recycle frames) and of empty pulls, then compare what was kept.
	burst(1, func([]byte, *message.SendResult) {})
	for _, mq := range mqs {
		if _, err := pc.Pull(ctx, consumer.PullRequest{Queue: mq, Offset: 1 << 40}); err != nil {
			t.Logf("pull far ahead: %v", err)
		}
	}
	mu.Lock()
	for _, s := range bad {
		t.Error(s)
	}
	mu.Unlock()
	for _, got := range pulled {
		key := got.Property(message.PropertyUniqClientMessageIDKeyIdx)
		rec, ok := sent[key]
		if !ok {
			t.Fatalf("pulled %s (queue %d offset %d): no send of the first burst reported it", key, got.QueueID, got.QueueOffset)
		}
		delete(sent, key)
		r := rec.result
		if !bytes.Equal(got.Body, rec.body) || got.MsgID != r.MsgID || got.OffsetMsgID != r.OffsetMsgID ||
			int(got.QueueID) != r.Queue.QueueID || got.QueueOffset != r.QueueOffset || r.Queue.Topic != topic {
			t.Fatalf("pulled %s at queue %d offset %d (offset id %s, %d body bytes), its SendResult says %s queue %d offset %d offset id %s (%d body bytes)",
				key, got.QueueID, got.QueueOffset, got.OffsetMsgID, len(got.Body), r.MsgID, r.Queue.QueueID, r.QueueOffset, r.OffsetMsgID, len(rec.body))
		}
	}
	if len(pulled) != producers*perProducer || len(sent) != 0 {
		t.Fatalf("pulled %d messages, %d sends not pulled", len(pulled), len(sent))
	}
	t.Logf("%d sends by %d producers, each pulled once and matching its SendResult after %d more sends", len(pulled), producers, producers*perProducer)
}

// problems collects failures reported from many goroutines (add); report hands them
// to the test at the end.
type problems struct {
	mu   sync.Mutex
	list []string
}

func (p *problems) add(format string, a ...any) {
	p.mu.Lock()
	p.list = append(p.list, fmt.Sprintf(format, a...))
	p.mu.Unlock()
}

func (p *problems) report(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.list {
		t.Error(s)
	}
}

// sendAsyncOnce sends m with SendAsync, counting it in pending until its callback has
// run. The callback must run exactly once: a second call is reported through fail (with
// what naming the send) and ignored; the first hands the outcome to done, then marks the
// send done. SendAsync's own error is returned, the send already marked done.
func sendAsyncOnce(p *Producer, m *message.Message, pending *sync.WaitGroup, fail func(string, ...any), what string, done func(*message.SendResult, error)) error {
	var calls atomic.Int32
	pending.Add(1)
	err := p.SendAsync(context.Background(), m, func(r *message.SendResult, err error) {
		if calls.Add(1) != 1 {
			fail("%s: callback ran twice (%v, %v)", what, r, err)
			return
		}
		defer pending.Done()
		done(r, err)
	})
	if err != nil {
		pending.Done()
	}
	return err
}

// waitGroupWithin waits for wg, failing t after d.
func waitGroupWithin(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: not all done within %v", what, d)
	}
}

// TestPooledAsyncSendsUnderHostileBroker: async sends whose recycled state sees every
// outcome at once. A broker over real TCP answers a quarter of the attempts later than
// SendTimeout (30 ms), refuses a quarter with SYSTEM_BUSY, drops the connection under
// every 17th, and is shut down mid-burst; 8 goroutines send through one producer whose
// MaxAsyncInflight (4) is always full. Every SendAsync returns (a failed, timed-out or
// dropped attempt gives its room back), every callback runs exactly once, and a stored
// send's result (async, or SendSync for every fourth send) is its own: its UNIQ_KEY, the
// offset message id and a queue offset the broker answered to that message (a late
// answer to an abandoned attempt never reaches another send).
func TestPooledAsyncSendsUnderHostileBroker(t *testing.T) {
	srv, err := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		answered = map[string][]int64{} // queue offsets answered, by UNIQ_KEY
		count    atomic.Int64
	)
	srv.Handle(remoting.SendMessageV2, func(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		c := count.Add(1)
		key := message.UnmarshalProperties(req.ExtFields["i"])[message.PropertyUniqClientMessageIDKeyIdx]
		switch {
		case c%17 == 5:
			_ = conn.Close()
			return nil
		case c%4 == 2:
			return remoting.NewResponse(remoting.SystemBusy, "[REJECTREQUEST]system busy")
		case c%4 == 1:
			select { // later than SendTimeout, mostly
			case <-time.After(time.Duration(10+c%60) * time.Millisecond):
			case <-ctx.Done():
				return nil
			}
		}
		mu.Lock()
		answered[key] = append(answered[key], c)
		mu.Unlock()
		r := remoting.NewResponse(remoting.Success, "")
		r.SetExt("msgId", "OFF"+key).SetExt("queueId", req.ExtFields["e"]).SetExt("queueOffset", strconv.FormatInt(c, 10)).SetExt("MSG_REGION", "DefaultRegion")
		return r
	})
	srv.Handle(remoting.HeartBeat, func(context.Context, *remoting.Conn, *remoting.RemotingCommand) *remoting.RemotingCommand {
		return remoting.NewResponse(remoting.Success, "")
	})
	srv.Handle(remoting.UnregisterClient, func(context.Context, *remoting.Conn, *remoting.RemotingCommand) *remoting.RemotingCommand {
		return remoting.NewResponse(remoting.Success, "")
	})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var stopOnce sync.Once
	stopBroker := func() {
		stopOnce.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
	}
	t.Cleanup(stopBroker)
	ns := newNamesrv(t, map[string]string{"T": routeJSON(4, [2]string{"broker-a", srv.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, SendTimeout: 30 * time.Millisecond,
		RetryTimesWhenSendAsyncFailed: 2, MaxAsyncInflight: 4})

	const goroutines, perG = 8, 150
	var (
		pending          sync.WaitGroup
		senders          sync.WaitGroup
		stored, failures atomic.Int64
		started          atomic.Int64
		bmu              sync.Mutex
		bad              []string
	)
	fail := func(format string, a ...any) {
		bmu.Lock()
		bad = append(bad, fmt.Sprintf(format, a...))
		bmu.Unlock()
	}
	// outcome checks the result of send i of goroutine g: its own UNIQ_KEY, offset message
	// id and a queue offset the broker answered to that message.
	outcome := func(g, i int, m *message.Message, r *message.SendResult, err error) {
		if err != nil {
			failures.Add(1)
			return
		}
		key := m.UniqKey()
		mu.Lock()
		offs := answered[key]
		mu.Unlock()
		ok := false
		for _, o := range offs {
			ok = ok || o == r.QueueOffset
		}
		if r.MsgID != key || r.OffsetMsgID != "OFF"+key || !ok {
			fail("send %d/%d (key %s): result %+v, broker answered offsets %v", g, i, key, *r, offs)
		}
		stored.Add(1)
	}
	for g := range goroutines {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range perG {
				if started.Add(1) == goroutines*perG/2 {
					go stopBroker() // mid-burst
				}
				m := message.NewMessage("T", testkit.SeqBody(g*1000+i, 40, 3))
				if i%3 == 0 {
					m.SetKeys("k" + strconv.Itoa(i))
				}
				if i%4 == 3 { // a sync send: its timeout counts from the attempt's clock reading too
					r, err := p.SendSync(context.Background(), m)
					outcome(g, i, m, r, err)
					continue
				}
				err := sendAsyncOnce(p, m, &pending, fail, fmt.Sprintf("send %d/%d", g, i), func(r *message.SendResult, err error) {
					outcome(g, i, m, r, err)
				})
				if err != nil {
					fail("send %d/%d: SendAsync: %v", g, i, err)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { senders.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("SendAsync calls blocked for 30 s (%d started, %d stored, %d failed): room lost", started.Load(), stored.Load(), failures.Load())
	}
	waitGroupWithin(t, &pending, 30*time.Second, "async callbacks")
	for _, s := range bad {
		t.Error(s)
	}
	t.Logf("%d sends: %d stored, %d failed; broker saw %d attempts", goroutines*perG, stored.Load(), failures.Load(), count.Load())
	if stored.Load() == 0 || failures.Load() == 0 || stored.Load()+failures.Load() != goroutines*perG {
		t.Fatalf("want some stored and some failed sends, all reported: %d stored, %d failed", stored.Load(), failures.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The broker is gone: Shutdown may report that unregistering failed, but it returns
	// in time, leaving no goroutine behind (goleak in TestMain).
	if err := p.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown after the burst: %v", err)
	}
}

// TestPooledAsyncSendsWithRefusedCredentials: a producer with a wrong secret and one with
// the right one send async at once through the same process's pools to a broker with
// aclEnable (real TCP). Every refused send fails once, with an error and no result;
// every signed send is stored with its own result; no SendAsync is left waiting for room
// (MaxAsyncInflight 4) and both producers shut down.
func TestPooledAsyncSendsWithRefusedCredentials(t *testing.T) {
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "plain_acl.yml")
	acl := "accounts:\n  - accessKey: adminKey\n    secretKey: adminSecret\n    admin: true\n" +
		"  - accessKey: appKey\n    secretKey: appSecret\n    defaultTopicPerm: PUB|SUB\n    defaultGroupPerm: SUB\n"
	if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ := testbroker.Start(t, broker.Config{AclEnable: true, AclFile: aclFile, AccessKey: "adminKey", SecretKey: "adminSecret"})
	const topic = "PooledACL"
	adm, err := admin.New(admin.Config{NamesrvAddrs: testbroker.Namesrv(b), Logger: quiet,
		Credentials: remoting.Credentials{AccessKey: "adminKey", SecretKey: "adminSecret"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.WaitTopicRoute(ctx, topic); err != nil {
		t.Fatal(err)
	}
	_ = adm.Close()
	good := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), MaxAsyncInflight: 4,
		Credentials: remoting.Credentials{AccessKey: "appKey", SecretKey: "appSecret"}})
	bad := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), MaxAsyncInflight: 4,
		Credentials: remoting.Credentials{AccessKey: "appKey", SecretKey: "wrongSecret"}})
	const perProducer = 200
	var (
		pending, senders sync.WaitGroup
		stored, refused  atomic.Int64
		probs            problems
	)
	fail := probs.add
	for _, pc := range []struct {
		p    *Producer
		good bool
	}{{good, true}, {bad, false}} {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range perProducer {
				m := message.NewMessage(topic, testkit.SeqBody(i, 50, 9))
				err := sendAsyncOnce(pc.p, m, &pending, fail, fmt.Sprintf("good=%v send %d", pc.good, i), func(r *message.SendResult, err error) {
					switch {
					case pc.good && (err != nil || r.MsgID != m.UniqKey() || r.OffsetMsgID == ""):
						fail("signed send %d: %+v %v", i, r, err)
					case pc.good:
						stored.Add(1)
					case err == nil || r != nil:
						fail("send %d with a wrong secret: %+v %v", i, r, err)
					default:
						refused.Add(1)
					}
				})
				if err != nil {
					fail("good=%v send %d: SendAsync: %v", pc.good, i, err)
				}
			}
		}()
	}
	waitGroupWithin(t, &senders, 30*time.Second, "SendAsync calls")
	waitGroupWithin(t, &pending, 30*time.Second, "async callbacks")
	probs.report(t)
	if stored.Load() != perProducer || refused.Load() != perProducer {
		t.Fatalf("%d signed sends stored, %d refused, want %d each", stored.Load(), refused.Load(), perProducer)
	}
}

// TestAsyncLimiterCampaign: 32 goroutines take and give back room of a small limiter (3
// sends, 100 bytes) 200 times each, a third of their waits bounded by a context that
// ends at about the time room is released. The limits hold at every moment (a send
// bigger than the byte limit only alone), every wait without a deadline ends (no
// wake-up lost, none counted twice), and afterwards nothing is held or waiting.
func TestAsyncLimiterCampaign(t *testing.T) {
	l := newAsyncLimiter(3, 100)
	var (
		held, heldBytes atomic.Int64
		acquired, ended atomic.Int64
		wg              sync.WaitGroup
		mu              sync.Mutex
		faults          []string
	)
	const goroutines, rounds = 32, 200
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				n := int64(1 + (g*7+i*13)%60)
				if i%37 == 0 {
					n = 150 // over the byte limit: admitted alone
				}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if (g+i)%3 == 0 {
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(i%5)*50*time.Microsecond)
				}
				err := l.acquire(ctx, n, nil)
				cancel()
				if err != nil {
					if ctx == context.Background() {
						mu.Lock()
						faults = append(faults, fmt.Sprintf("acquire without deadline: %v", err))
						mu.Unlock()
					}
					ended.Add(1)
					continue
				}
				acquired.Add(1)
				c, b := held.Add(1), heldBytes.Add(n)
				if c > 3 || (b > 100 && c > 1) { // over 100 bytes only alone
					mu.Lock()
					faults = append(faults, fmt.Sprintf("%d sends, %d bytes held after taking %d", c, b, n))
					mu.Unlock()
				}
				runtime.Gosched()
				held.Add(-1)
				heldBytes.Add(-n)
				l.release(n)
			}
		}()
	}
	waitGroupWithin(t, &wg, 30*time.Second, "limiter campaign")
	for _, p := range faults {
		t.Error(p)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count != 0 || l.bytes != 0 || len(l.waiting) != 0 {
		t.Fatalf("after the campaign: count %d, bytes %d, %d waiting", l.count, l.bytes, len(l.waiting))
	}
	if acquired.Load()+ended.Load() != goroutines*rounds || acquired.Load() == 0 {
		t.Fatalf("%d acquired + %d ended by their context, want %d in all", acquired.Load(), ended.Load(), goroutines*rounds)
	}
	t.Logf("%d acquires, %d ended by their context", acquired.Load(), ended.Load())
}

// TestPooledAsyncSendsShutdownMidBurst: Shutdown, with a deadline shorter than the
// broker's answers (0–270 ms late), runs while 8 goroutines send async through a full
// MaxAsyncInflight. Shutdown returns (reporting the sends it cut off), every SendAsync
// returns (ErrClosed once the producer closes, also for those waiting for room), every
// accepted send's callback runs exactly once and before Shutdown returns, a stored send's
// result is its own, and no goroutine is left (goleak in TestMain).
func TestPooledAsyncSendsShutdownMidBurst(t *testing.T) {
	var count atomic.Int64
	srv, err := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle(remoting.SendMessageV2, func(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		c := count.Add(1)
		select {
		case <-time.After(time.Duration(c%10) * 30 * time.Millisecond):
		case <-ctx.Done():
			return nil
		}
		key := message.UnmarshalProperties(req.ExtFields["i"])[message.PropertyUniqClientMessageIDKeyIdx]
		r := remoting.NewResponse(remoting.Success, "")
		r.SetExt("msgId", "OFF"+key).SetExt("queueId", req.ExtFields["e"]).SetExt("queueOffset", strconv.FormatInt(c, 10))
		return r
	})
	okh := func(context.Context, *remoting.Conn, *remoting.RemotingCommand) *remoting.RemotingCommand {
		return remoting.NewResponse(remoting.Success, "")
	}
	srv.Handle(remoting.HeartBeat, okh)
	srv.Handle(remoting.UnregisterClient, okh)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	ns := newNamesrv(t, map[string]string{"T": routeJSON(4, [2]string{"broker-a", srv.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, SendTimeout: 3 * time.Second, MaxAsyncInflight: 64})

	const goroutines, perG = 8, 100
	var (
		pending, senders         sync.WaitGroup
		stored, failed, closedAt atomic.Int64
		started                  atomic.Int64
		probs                    problems
	)
	fail := probs.add
	shutErr := make(chan error, 1)
	for g := range goroutines {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range perG {
				if started.Add(1) == goroutines*perG/3 {
					go func() {
						ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
						defer cancel()
						err := p.Shutdown(ctx)
						closedAt.Store(stored.Load() + failed.Load())
						shutErr <- err
					}()
				}
				m := message.NewMessage("T", testkit.SeqBody(g*1000+i, 40, 5))
				err := sendAsyncOnce(p, m, &pending, fail, fmt.Sprintf("send %d/%d", g, i), func(r *message.SendResult, err error) {
					if err != nil {
						failed.Add(1)
						return
					}
					if r.MsgID != m.UniqKey() || r.OffsetMsgID != "OFF"+m.UniqKey() {
						fail("send %d/%d (key %s): result %+v", g, i, m.UniqKey(), *r)
					}
					stored.Add(1)
				})
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						fail("send %d/%d: SendAsync: %v", g, i, err)
					}
				}
			}
		}()
	}
	waitGroupWithin(t, &senders, 30*time.Second, "SendAsync calls")
	var serr error
	select {
	case serr = <-shutErr:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return within 30 s")
	}
	waitGroupWithin(t, &pending, 30*time.Second, "async callbacks")
	probs.report(t)
	t.Logf("Shutdown: %v; %d stored, %d failed, %d answered by the broker", serr, stored.Load(), failed.Load(), count.Load())
	if got := stored.Load() + failed.Load(); got != closedAt.Load() {
		t.Fatalf("%d callbacks ran, %d of them before Shutdown returned", got, closedAt.Load())
	}
	if stored.Load() == 0 {
		t.Fatal("no send stored before Shutdown")
	}
}

// TestPooledAsyncSendsRealBrokerStopped: the real broker (over TCP) shuts down while 8
// goroutines send async through a full MaxAsyncInflight (8) with SendTimeout 2 s. Every
// SendAsync returns, every callback runs exactly once, and every send reported stored
// carries its own message's id; no goroutine is left once the producer shut down
// (goleak in TestMain).
func TestPooledAsyncSendsRealBrokerStopped(t *testing.T) {
	b, stop := testbroker.Start(t, broker.Config{})
	const topic = "PooledStop"
	createTopic(t, testbroker.Namesrv(b), topic, 4)
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), MaxAsyncInflight: 8, SendTimeout: 2 * time.Second})
	const goroutines, perG = 8, 400
	var (
		pending, senders sync.WaitGroup
		stored, failed   atomic.Int64
		probs            problems
	)
	fail := probs.add
	for g := range goroutines {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range perG {
				m := message.NewMessage(topic, testkit.SeqBody(g*1000+i, 100, 7))
				err := sendAsyncOnce(p, m, &pending, fail, fmt.Sprintf("send %d/%d", g, i), func(r *message.SendResult, err error) {
					if err != nil {
						failed.Add(1)
						return
					}
					if r.MsgID != m.UniqKey() || r.OffsetMsgID == "" {
						fail("send %d/%d: result %+v for message %s", g, i, *r, m.UniqKey())
					}
					stored.Add(1)
				})
				if err != nil {
					fail("send %d/%d: SendAsync: %v", g, i, err)
				}
			}
		}()
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return stored.Load() > 200 }, "some sends stored")
	stop()
	waitGroupWithin(t, &senders, 30*time.Second, "SendAsync calls")
	waitGroupWithin(t, &pending, 30*time.Second, "async callbacks")
	probs.report(t)
	t.Logf("%d sends: %d stored, %d failed", goroutines*perG, stored.Load(), failed.Load())
	if stored.Load()+failed.Load() != goroutines*perG || failed.Load() == 0 {
		t.Fatalf("%d stored + %d failed, want %d with some failed after the broker stopped", stored.Load(), failed.Load(), goroutines*perG)
	}
}
