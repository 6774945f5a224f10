package compat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/sluicemq/sluice/internal/testkit"
)

// TestOfficialBatchSend: SendSync with several messages makes the official producer use
// SEND_BATCH_MESSAGE (320). Each batch must land in one queue at consecutive offsets
// starting at the SendResult's queue offset, and an official consumer must receive
// every message of it intact.
func TestOfficialBatchSend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const topic = "CompatBatch"
	e.createTopic(topic, 4)
	col := newCollector(topic)
	stop := officialConsumer(t, e, "compat_batch", "batch-1", topic, "*", col)
	e.waitMembers("compat_batch", 1)
	p := newOfficialProducer(t, e, "batch-producer")

	const batches, per = 6, 10
	type placed struct {
		queue  int
		offset int64
	}
	first := make([]placed, batches)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for b := range batches {
		msgs := make([]*primitive.Message, per)
		for j := range per {
			msgs[j] = officialMessage(specMsg(topic, b*per+j))
		}
		res, err := p.SendSync(ctx, msgs...)
		if err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
		if res.Status != primitive.SendOK || res.MessageQueue == nil {
			t.Fatalf("batch %d: status %v queue %v", b, res.Status, res.MessageQueue)
		}
		first[b] = placed{res.MessageQueue.QueueId, res.QueueOffset}
	}
	seqs := seqRange(0, batches*per)
	testkit.WaitFor(t, 30*time.Second, func() bool { return col.distinct() >= len(seqs) }, func() string { return col.missing(seqs) })
	stop()
	col.checkExactly(t, "compat_batch", seqs)
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, s := range seqs {
		r, want := col.where[s], first[s/per]
		if r.queueID != want.queue || r.queueOffset != want.offset+int64(s%per) {
			t.Errorf("message %d (batch %d item %d) at queue %d offset %d, want queue %d offset %d",
				s, s/per, s%per, r.queueID, r.queueOffset, want.queue, want.offset+int64(s%per))
		}
	}
}

// TestOfficialProducerAutoCreatesTopic: the official producer sends to a topic nobody
// created. It finds no route, sends with the route of TBW102 and defaultTopicQueueNums
// 4, and the broker creates the topic; the route then shows 4 queues and an official
// consumer receives every message.
func TestOfficialProducerAutoCreatesTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const topic = "CompatAutoCreated"
	send := officialProducer(t, e, "auto-producer")
	seqs := seqRange(0, 40)
	sendAll(t, send, topic, seqs, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	route, err := e.adm.WaitTopicRoute(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(route.QueueDatas) != 1 || route.QueueDatas[0].WriteQueueNums != 4 || route.QueueDatas[0].ReadQueueNums != 4 {
		t.Errorf("auto-created route queue data %+v, want one broker with 4 read and 4 write queues", route.QueueDatas)
	}
	col := newCollector(topic)
	stop := officialConsumer(t, e, "compat_auto", "auto-1", topic, "*", col)
	testkit.WaitFor(t, 30*time.Second, func() bool { return col.distinct() >= len(seqs) }, func() string { return col.missing(seqs) })
	stop()
	col.checkExactly(t, "compat_auto", seqs)
}

// TestOfficialClientsAcrossBrokerRestart: group compat_resume consumes a first round
// and commits its offsets, then stops; the broker shuts down and restarts on the same
// data directory and the same broker and name-server ports; a new instance of
// compat_resume must get exactly the second round (nothing committed redelivered,
// nothing lost). Meanwhile an official producer and a consumer of group compat_live stay
// up across the restart: the producer's sends after the restart must succeed and the
// live consumer must end up with both rounds, each message once.
//
// Most of its time is the live official consumer waiting out its fixed 30 s pull
// timeout for long-polling pulls that the old broker never answered (the client does
// not fail pending requests when a connection drops), so all tests here run in parallel.
func TestOfficialClientsAcrossBrokerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const topic = "CompatRestart"
	const n1, n2 = 600, 600
	e.createTopic(topic, 4)
	live, resume1, resume2 := newCollector(topic), newCollector(topic), newCollector(topic)
	stopLive := officialConsumer(t, e, "compat_live", "live-1", topic, "*", live)
	stopResume1 := officialConsumer(t, e, "compat_resume", "resume-1", topic, "*", resume1)
	e.waitMembers("compat_live", 1)
	e.waitMembers("compat_resume", 1)
	send := officialProducer(t, e, "restart-producer")

	round1 := seqRange(0, n1)
	sendAll(t, send, topic, round1, 4)
	testkit.WaitFor(t, 30*time.Second, func() bool { return live.distinct() >= n1 && resume1.distinct() >= n1 }, func() string {
		return fmt.Sprintf("live: %s; resume-1: %s", live.missing(round1), resume1.missing(round1))
	})
	// The client commits through the next pull and every 5 s; wait until the broker
	// holds the end of every queue as compat_resume's offset.
	var lag string
	committed := func() bool {
		lag = ""
		for q := range 4 {
			if c, m := e.committedOffset("compat_resume", topic, q), e.maxOffset(topic, q); c != m {
				lag += fmt.Sprintf(" queue %d committed %d of %d;", q, c, m)
			}
		}
		return lag == ""
	}
	testkit.WaitFor(t, 20*time.Second, committed, func() string { return "compat_resume offsets:" + lag })
	stopResume1()

	addr, ns := e.b.Addr(), e.ns()
	maxBefore := make([]int64, 4)
	for q := range maxBefore {
		maxBefore[q] = e.maxOffset(topic, q)
	}
	e.stopBroker()
	restarted := time.Now()
	e.startBroker(addr, ns)
	if e.b.Addr() != addr || e.ns() != ns {
		t.Fatalf("restarted broker on %s / name server %s, want %s / %s", e.b.Addr(), e.ns(), addr, ns)
	}
	for q := range maxBefore {
		if m, c := e.maxOffset(topic, q), e.committedOffset("compat_resume", topic, q); m != maxBefore[q] || c != m {
			t.Fatalf("after restart queue %d: max offset %d (was %d), compat_resume offset %d", q, m, maxBefore[q], c)
		}
	}

	round2 := seqRange(n1, n1+n2)
	sendAll(t, send, topic, round2, 4)
	stopResume2 := officialConsumer(t, e, "compat_resume", "resume-2", topic, "*", resume2)
	both := seqRange(0, n1+n2)
	testkit.WaitFor(t, 60*time.Second, func() bool { return live.distinct() >= n1+n2 && resume2.distinct() >= n2 }, func() string {
		return fmt.Sprintf("live: %s; resume-2: %s", live.missing(both), resume2.missing(round2))
	})
	t.Logf("both groups had round 2 %v after the restart", time.Since(restarted).Round(time.Millisecond))
	stopLive()
	stopResume2()

	resume1.checkExactly(t, "compat_resume (before restart)", round1)
	resume2.checkExactly(t, "compat_resume (after restart)", round2)
	live.checkExactly(t, "compat_live", both)
}
