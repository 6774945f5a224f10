package failover

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// Delayed messages due while the master is down: per round, perRound messages with delay
// level 3 (10 s) are sent (spread over both masters), broker-a's master is killed at once
// and kept down until after the last of its messages was due; when it is back its
// schedule service must deliver them, each once (effects through the inbox), none lost.
// Lateness is measured from the acknowledgement of the send plus 10 s to the first
// delivery.
func TestFailoverDelayDue(t *testing.T) {
	kills := campaignKills(t)
	const topic, group, perRound, level = "DelayFailover", "delay-failover", 40, 3
	const delay = 10 * time.Second // level 3 of the default messageDelayLevel
	c := featureCluster(t, topic, peers.RocketMQClusterOptions{}, false)
	ctx := context.Background()
	l := newLedger(t, group)
	cons := startConsumer(t, c.NamesrvAddr, group, topic, l, testkit.Quiet())
	testkit.ShutdownOnCleanup(t, cons.Shutdown)
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{c.NamesrvAddr}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, p.Shutdown)

	type delayed struct {
		id     string
		broker string
		due    time.Time
		round  int
	}
	var sent []delayed
	sendFailed := 0
	down := outage(t)
	var outs []outageRec
	n := 0
	for k := 0; k < kills; k++ {
		// A restarted SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its slave is back,
		// and the producer then avoids it; the round starts when it replicates again and
		// no longer avoided, so that broker-a gets its share of the delayed messages.
		waitReplicating(t, p, topic)
		testkit.WaitFor(t, 120*time.Second, func() bool { _, avoided := p.AvoidedBrokers()["broker-a"]; return !avoided }, "broker-a no longer avoided")
		var lastA time.Time
		for j := 0; j < perRound; j++ {
			id := fmt.Sprintf("d%05d", n)
			n++
			sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			start := time.Now()
			res, err := p.SendSync(sctx, message.NewMessage(topic, []byte(id)).SetKeys(id).SetDelayLevel(level))
			cancel()
			rec := sendRec{key: id, start: start, end: time.Now(), err: err}
			if err == nil && res.Status != message.SendOK {
				rec.err = fmt.Errorf("stored with status %v", res.Status)
			}
			if err == nil {
				rec.broker = res.Queue.BrokerName
			}
			l.mu.Lock()
			l.sends = append(l.sends, rec)
			l.mu.Unlock()
			if rec.err != nil {
				sendFailed++
				continue
			}
			d := delayed{id: id, broker: rec.broker, due: rec.end.Add(delay), round: k}
			sent = append(sent, d)
			if d.broker == "broker-a" {
				lastA = d.due
			}
		}
		if lastA.IsZero() {
			t.Fatalf("round %d: no delayed message was stored on broker-a", k+1)
		}
		o := killMaster(t, c, down, nil, func() bool { return time.Now().After(lastA.Add(time.Second)) })
		outs = append(outs, o)
		t.Logf("kill %d/%d: %s down %v", k+1, kills, o.what, o.back.Sub(o.kill).Round(100*time.Millisecond))
	}
	ok := testkit.Eventually(300*time.Second, l.allApplied)
	testkit.Settle(120*time.Second, 15*time.Second, func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.delivered)
	}, nil)

	r := l.summarize("Apache RocketMQ 4.9.7, 2 × (SYNC_MASTER + SLAVE), delay level 3 (10 s)", "kill -9 master broker-a after the sends", outs)
	first := map[string]time.Time{}
	l.mu.Lock()
	for _, d := range l.delivered {
		if _, seen := first[d.key]; !seen {
			first[d.key] = d.at
		}
	}
	l.mu.Unlock()
	var lateOut, lateOther, afterBack []time.Duration
	dueInOutage, deliveredInOutage := 0, 0
	for _, d := range sent {
		at, seen := first[d.id]
		if !seen {
			continue
		}
		o := outs[d.round]
		if d.broker == "broker-a" && d.due.After(o.kill) && d.due.Before(o.back) {
			dueInOutage++
			lateOut = append(lateOut, at.Sub(d.due))
			afterBack = append(afterBack, at.Sub(o.back))
			if at.Before(o.back) {
				deliveredInOutage++
			}
		} else {
			lateOther = append(lateOther, at.Sub(d.due))
		}
	}
	o50, omx := percentiles(lateOut)
	b50, bmx := percentiles(afterBack)
	x50, xmx := percentiles(lateOther)
	t.Logf("FIGURES %v (load average %s); keys stored more than once in the topic %d", r, loadAverage(), l.storedTwice())
	t.Logf("DELAY %d delayed messages acknowledged (%d sends failed); %d of broker-a's were due while its master was down: delivered %v (p50) / %v (max) late, %v / %v after the master was back, %d of them before it was back; the others (broker-b's, and broker-a's due after the restart): %v / %v late",
		len(sent), sendFailed, dueInOutage, o50.Round(100*time.Millisecond), omx.Round(100*time.Millisecond),
		b50.Round(100*time.Millisecond), bmx.Round(100*time.Millisecond), deliveredInOutage,
		x50.Round(100*time.Millisecond), xmx.Round(100*time.Millisecond))
	if !ok || r.lost != 0 {
		t.Errorf("%d acknowledged delayed messages never delivered", r.lost)
	}
	if r.doubled != 0 {
		t.Errorf("%d effects applied twice despite the inbox", r.doubled)
	}
	if dueInOutage == 0 {
		t.Errorf("no delayed message was due during an outage: the campaign tested nothing")
	}
}
