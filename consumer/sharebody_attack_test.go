package consumer

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

// attackBody is the body of message seq: 8 bytes seq, then deterministic bytes
// (compressible text for seq%3==0, random otherwise); a few are near the 4 MiB limit.
func attackBody(seq int) []byte {
	size := 9 + int(uint64(seq)*2654435761%20000)
	switch seq {
	case 100: // near the 4 MiB limit
		size = 4<<20 - 4096
	case 701:
		size = 600 << 10
	}
	return testkit.SeqBody(seq, size, 77)
}

func attackLongProp(seq int) string { return strings.Repeat(strconv.Itoa(seq)+"p", 150) }

// attackCheck verifies everything of m against what was sent for its seq.
func attackCheck(m *message.MessageExt, wantTopic func(int) string) (int, error) {
	seq, err := strconv.Atoi(m.Property("seq"))
	if err != nil {
		return -1, fmt.Errorf("message %s: seq property %q", m.MsgID, m.Property("seq"))
	}
	want := attackBody(seq)
	if !bytes.Equal(m.Body, want) {
		return seq, fmt.Errorf("seq %d: body of %d bytes differs from the %d sent (first bytes %x)", seq, len(m.Body), len(want), m.Body[:min(16, len(m.Body))])
	}
	if got := m.Property("sum"); got != testkit.Sum(want) {
		return seq, fmt.Errorf("seq %d: sum property %q", seq, got)
	}
	if got := m.Property("long"); got != attackLongProp(seq) {
		return seq, fmt.Errorf("seq %d: long property of %d bytes differs", seq, len(got))
	}
	if got := m.Property("bucket"); got != strconv.Itoa(seq%10) {
		return seq, fmt.Errorf("seq %d: bucket %q", seq, got)
	}
	if wantTopic != nil && m.Topic != wantTopic(seq) {
		return seq, fmt.Errorf("seq %d: topic %q, want %q", seq, m.Topic, wantTopic(seq))
	}
	return seq, nil
}

// keeper records the messages a group's handlers saw and keeps them for a later check.
type keeper struct {
	mu     sync.Mutex
	seen   map[int]int
	kept   []*message.MessageExt
	errs   []error
	checks atomic.Int64
	spare  atomic.Int64 // deliveries whose Body had spare capacity
}

func newKeeper() *keeper { return &keeper{seen: map[int]int{}} }

func (k *keeper) fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.errs) < 20 {
		k.errs = append(k.errs, err)
	}
}

func (k *keeper) has(want []int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range want {
		if k.seen[s] == 0 {
			return false
		}
	}
	return true
}

func (k *keeper) missing(want []int) []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []int
	for _, s := range want {
		if k.seen[s] == 0 {
			out = append(out, s)
		}
	}
	return out
}

// TestShareBodyAttack: producers send checksummed messages (plain, zlib-compressed, near
// 4 MiB) to two topics while push consumers of several groups (one consumer on two
// topics, two consumers of one group, a tag filter that skips 90 %) and a SQL92 pull
// consumer consume them, and a raw client sends junk PULL_MESSAGE headers. Every body and
// property is checked when handed over, handlers append to and keep the messages, and
// every kept message is checked again at the end.
func TestShareBodyAttack(t *testing.T) {
	e := newEnvWith(t, func(c *broker.Config) { c.EnablePropertyFilter = true })
	const topicA, topicB = "AtkA", "AtkB"
	e.createTopic(topicA, 8)
	e.createTopic(topicB, 3)
	const n = 800
	topicOf := func(seq int) string {
		if seq%5 == 4 {
			return topicB
		}
		return topicA
	}

	groups := map[string]*keeper{"gAll": newKeeper(), "gTwo": newKeeper(), "gTag": newKeeper(), "gSQL": newKeeper()}
	var retried sync.Map // seq → true once failed on purpose
	handler := func(k *keeper, failSome bool) func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			res := message.ConsumeSuccess
			for _, m := range msgs {
				seq, err := attackCheck(m, topicOf)
				k.checks.Add(1)
				if err != nil {
					k.fail(fmt.Errorf("on delivery: %w", err))
					continue
				}
				// A careless handler: append to the body and scribble on the result.
				before := append([]byte(nil), m.Body...)
				x := append(m.Body, "APPENDED-BY-HANDLER"...)
				for i := len(m.Body); i < len(x); i++ {
					x[i] ^= 0x5a // only the appended bytes: they must be no other message's
				}
				if cap(m.Body) > len(m.Body) {
					k.spare.Add(1)
				}
				if !bytes.Equal(m.Body, before) {
					k.fail(fmt.Errorf("seq %d: appending to Body changed Body", seq))
				}
				if failSome && seq%50 == 7 {
					if _, loaded := retried.LoadOrStore(seq, true); !loaded {
						res = message.ReconsumeLater
					}
				}
				k.mu.Lock()
				k.seen[seq]++
				k.kept = append(k.kept, m)
				k.mu.Unlock()
			}
			return res, nil
		}
	}

	mk := func(group string) *PushConsumer {
		c, err := NewPushConsumer(Config{NamesrvAddrs: e.namesrv, Group: group, ConsumeFromWhere: ConsumeFromFirstOffset,
			RebalanceInterval: 500 * time.Millisecond, PersistOffsetInterval: 500 * time.Millisecond,
			ConsumeMessageBatchMaxSize: 4, PullBatchSize: 32, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { shutdown(t, c) })
		return c
	}
	all := mk("gAll")
	if err := all.Subscribe(topicA, "*", handler(groups["gAll"], true)); err != nil {
		t.Fatal(err)
	}
	if err := all.Subscribe(topicB, "*", handler(groups["gAll"], true)); err != nil {
		t.Fatal(err)
	}
	two1, two2 := mk("gTwo"), mk("gTwo")
	for _, c := range []*PushConsumer{two1, two2} {
		if err := c.Subscribe(topicA, "*", handler(groups["gTwo"], false)); err != nil {
			t.Fatal(err)
		}
	}
	tag := mk("gTag")
	if err := tag.Subscribe(topicA, "A", handler(groups["gTag"], false)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*PushConsumer{all, two1, two2, tag} {
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()

	// SQL92 pull consumer: bucket = 3 on topic A.
	pc, err := NewPullConsumer(PullConfig{NamesrvAddrs: e.namesrv, Group: "gSQL", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = pc.Shutdown(sctx)
	})
	mqs, err := pc.MessageQueues(ctx, topicA)
	if err != nil {
		t.Fatal(err)
	}
	sqlK := groups["gSQL"]
	var sqlPulls atomic.Int64
	for _, mq := range mqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(0)
			for ctx.Err() == nil {
				r, err := pc.Pull(ctx, PullRequest{Queue: mq, Expression: "bucket = 3", ExpressionType: ExpressionSQL92, Offset: off, MaxNums: 32, LongPoll: 300 * time.Millisecond})
				if err != nil {
					if ctx.Err() == nil {
						sqlK.fail(fmt.Errorf("sql pull %v at %d: %w", mq, off, err))
					}
					return
				}
				sqlPulls.Add(1)
				for _, m := range r.Messages {
					seq, err := attackCheck(m, topicOf)
					sqlK.checks.Add(1)
					if err != nil {
						sqlK.fail(err)
						continue
					}
					if cap(m.Body) > len(m.Body) {
						sqlK.spare.Add(1)
					}
					if seq%10 != 3 {
						sqlK.fail(fmt.Errorf("sql filter let seq %d through", seq))
					}
					sqlK.mu.Lock()
					sqlK.seen[seq]++
					sqlK.kept = append(sqlK.kept, m)
					sqlK.mu.Unlock()
				}
				off = r.NextBeginOffset
			}
		}()
	}

	// Junk pulls on a raw connection.
	junkClient, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = junkClient.Close() })
	var junkAnswers, junkFailed atomic.Int64
	var junkErrs []string
	var junkMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		vals := []string{"", "-1", "0", "1", "7", "99999999999999999999", "abc", "-9223372036854775808", "2147483648", strings.Repeat("9", 300), "1e3", " 1"}
		fields := []string{"consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis", "subscription", "subVersion", "expressionType"}
		for i := 0; i < 300 && ctx.Err() == nil; i++ {
			ext := map[string]string{"consumerGroup": "gJunk", "topic": topicA, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
				"sysFlag": strconv.Itoa(wire.PullFlagSubscription), "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0", "expressionType": "TAG"}
			for range 1 + r.IntN(3) {
				f := fields[r.IntN(len(fields))]
				switch r.IntN(4) {
				case 0:
					delete(ext, f)
				case 1:
					ext[f] = strings.Repeat("x", 1+r.IntN(40000))
				default:
					ext[f] = vals[r.IntN(len(vals))]
				}
			}
			if r.IntN(5) == 0 {
				ext["expressionType"] = "SQL92"
				ext["subscription"] = []string{"bucket = 3", "a >", "((((", "bucket IN ()", strings.Repeat("a = 1 AND ", 3000) + "a = 1"}[r.IntN(5)]
			}
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			resp, err := junkClient.InvokeSync(cctx, e.broker.Addr(), remoting.NewRequest(remoting.PullMessage, ext, nil))
			ccancel()
			if err != nil {
				junkFailed.Add(1)
				if ctx.Err() == nil {
					junkMu.Lock()
					junkErrs = append(junkErrs, fmt.Sprintf("%v: %v", ext, err))
					junkMu.Unlock()
				}
				continue
			}
			junkAnswers.Add(1)
			if resp.ResponseCode() == remoting.Success {
				ms, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
				if err != nil {
					junkMu.Lock()
					junkErrs = append(junkErrs, fmt.Sprintf("junk pull decode: %v", err))
					junkMu.Unlock()
				}
				for _, m := range ms {
					if m.SysFlag&message.SysFlagCompressed != 0 {
						if m.Body, err = message.Inflate(m.Body); err != nil {
							junkMu.Lock()
							junkErrs = append(junkErrs, fmt.Sprintf("junk pull inflate: %v", err))
							junkMu.Unlock()
							continue
						}
					}
					if _, err := attackCheck(m, topicOf); err != nil {
						junkMu.Lock()
						junkErrs = append(junkErrs, "junk pull: "+err.Error())
						junkMu.Unlock()
					}
				}
			}
		}
	}()

	// Producers.
	var sentOK atomic.Int64
	var sendErrs []string
	var sendMu sync.Mutex
	for w := range 4 {
		p, err := producer.New(producer.Config{NamesrvAddrs: e.namesrv, Group: "pg" + strconv.Itoa(w), Logger: quiet, SendTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			_ = p.Shutdown(sctx)
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := w; seq < n; seq += 4 {
				body := attackBody(seq)
				m := message.NewMessage(topicOf(seq), body)
				m.SetProperty("seq", strconv.Itoa(seq)).SetProperty("sum", testkit.Sum(body)).
					SetProperty("long", attackLongProp(seq)).SetProperty("bucket", strconv.Itoa(seq%10))
				if seq%10 == 0 {
					m.SetTag("A")
				} else {
					m.SetTag("B")
				}
				m.SetKeys("k"+strconv.Itoa(seq), "kk")
				if _, err := p.SendSync(ctx, m); err != nil {
					sendMu.Lock()
					sendErrs = append(sendErrs, fmt.Sprintf("seq %d (%d bytes): %v", seq, len(body), err))
					sendMu.Unlock()
					continue
				}
				sentOK.Add(1)
			}
		}()
	}

	var wantAll, wantA, wantTag, wantSQL []int
	for s := range n {
		wantAll = append(wantAll, s)
		if topicOf(s) == topicA {
			wantA = append(wantA, s)
			if s%10 == 0 {
				wantTag = append(wantTag, s)
			}
			if s%10 == 3 {
				wantSQL = append(wantSQL, s)
			}
		}
	}
	want := map[string][]int{"gAll": wantAll, "gTwo": wantA, "gTag": wantTag, "gSQL": wantSQL}
	ok := testkit.Eventually(120*time.Second, func() bool {
		for g, k := range groups {
			if !k.has(want[g]) {
				return false
			}
		}
		if junkAnswers.Load()+junkFailed.Load() < 300 {
			return false
		}
		// Messages failed on purpose come back through the retry topic (1 s delay level).
		k := groups["gAll"]
		k.mu.Lock()
		defer k.mu.Unlock()
		for s := 7; s < n; s += 50 {
			if k.seen[s] < 2 {
				return false
			}
		}
		return true
	})
	cancel()
	wg.Wait()
	for _, c := range []*PushConsumer{all, two1, two2, tag} {
		shutdown(t, c) // no handler runs once this returns: the kept messages are ours alone
	}
	sendMu.Lock()
	for _, s := range sendErrs {
		t.Errorf("send: %s", s)
	}
	sendMu.Unlock()
	if !ok {
		for g, k := range groups {
			if m := k.missing(want[g]); len(m) > 0 {
				t.Errorf("group %s: %d of %d messages never delivered, e.g. %v", g, len(m), len(want[g]), m[:min(10, len(m))])
			}
		}
	}
	for _, s := range junkErrs[:min(10, len(junkErrs))] {
		t.Errorf("junk: %.300s", s)
	}
	// Re-check every kept message now that many pulls have come and gone.
	total := 0
	for g, k := range groups {
		for _, err := range k.errs {
			t.Errorf("group %s: %v", g, err)
		}
		for _, m := range k.kept {
			if _, err := attackCheck(m, topicOf); err != nil {
				t.Errorf("group %s, kept message re-checked later: %v", g, err)
			}
		}
		total += len(k.kept)
		t.Logf("group %s: %d deliveries checked, %d kept and re-checked, %d distinct, %d with spare capacity", g, k.checks.Load(), len(k.kept), len(k.seen), k.spare.Load())
	}
	t.Logf("sent %d, junk pulls answered %d, SQL pulls %d, messages re-checked %d", sentOK.Load(), junkAnswers.Load(), sqlPulls.Load(), total)
}
