package compat_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/sdktest"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

func atkBody(seq int) []byte {
	size := 9 + int(uint64(seq)*2654435761%30000)
	if seq == 250 {
		size = 4<<20 - 8192
	}
	return testkit.SeqBody(seq, size, 5)
}

// TestOfficialAndSluiceConsumersUnderPullLoad: a Sluice producer sends checksummed
// bodies (plain, zlib-compressed, one near 4 MiB) while an official Go push consumer and
// a Sluice push consumer (separate groups) consume them from the Sluice broker; each
// keeps what it got and every body and property is checked on delivery and again at
// the end.
func TestOfficialAndSluiceConsumersUnderPullLoad(t *testing.T) {
	e := newEnv(t)
	const topic, n = "PullAtk", 600
	e.createTopic(topic, 6)

	type got struct {
		mu   sync.Mutex
		seen map[int]int
		errs []string
		keep []func() error // re-checks of kept messages
	}
	off, slu := &got{seen: map[int]int{}}, &got{seen: map[int]int{}}
	check := func(g *got, seqS, sum string, body []byte, reCheck func() []byte) {
		seq, err := strconv.Atoi(seqS)
		g.mu.Lock()
		defer g.mu.Unlock()
		if err != nil {
			g.errs = append(g.errs, "bad seq "+seqS)
			return
		}
		want := atkBody(seq)
		if !bytes.Equal(body, want) || sum != testkit.Sum(want) {
			g.errs = append(g.errs, fmt.Sprintf("seq %d: body %d bytes (want %d), sum %q", seq, len(body), len(want), sum))
		}
		g.seen[seq]++
		g.keep = append(g.keep, func() error {
			if !bytes.Equal(reCheck(), want) {
				return fmt.Errorf("kept message seq %d changed", seq)
			}
			return nil
		})
	}

	stopOfficial := startOfficialConsumer(t, e, "gOfficial", "official", topic, "*", func(m *primitive.MessageExt) {
		check(off, m.GetProperty("seq"), m.GetProperty("sum"), m.Body, func() []byte { return m.Body })
	})

	sc, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{e.ns()}, Group: "gSluice",
		InstanceName: clientInstance(t, "sluice"), ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Subscribe(topic, "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			check(slu, m.Property("seq"), m.Property("sum"), m.Body, func() []byte { return m.Body })
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopSluice := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := sc.Shutdown(ctx); err != nil {
			t.Errorf("sluice consumer shutdown: %v", err)
		}
	}
	t.Cleanup(stopSluice)

	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := range 3 {
		p := sdktest.StartProducer(t, producer.Config{NamesrvAddrs: []string{e.ns()}, Group: "pgAtk", InstanceName: clientInstance(t, "p"+strconv.Itoa(w)), Logger: e.log, SendTimeout: 20 * time.Second}, sdktest.MustShutDown)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := w; seq < n; seq += 3 {
				body := atkBody(seq)
				m := message.NewMessage(topic, body)
				m.SetTag("T"+strconv.Itoa(seq%4)).SetProperty("seq", strconv.Itoa(seq)).SetProperty("sum", testkit.Sum(body))
				if _, err := p.SendSync(context.Background(), m); err != nil {
					t.Errorf("send seq %d (%d bytes): %v", seq, len(body), err)
					continue
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	all := func(g *got) func() bool {
		return func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.seen) == int(sent.Load())
		}
	}
	testkit.WaitFor(t, 90*time.Second, func() bool { return all(off)() && all(slu)() }, "both groups get every message")
	stopOfficial()
	stopSluice()
	for name, g := range map[string]*got{"official": off, "sluice": slu} {
		for _, s := range g.errs[:min(len(g.errs), 10)] {
			t.Errorf("%s: %s", name, s)
		}
		for _, f := range g.keep {
			if err := f(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		t.Logf("%s: %d deliveries, %d distinct, %d kept and re-checked", name, len(g.keep), len(g.seen), len(g.keep))
	}
	t.Logf("sent %d", sent.Load())
}
