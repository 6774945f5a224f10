package peers_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/peers/peertest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestJavaAsyncBurstsAgainstSluice: the RocketMQ Java producer sends hundreds of async
// messages at once, with JSON and with binary headers, so the Sluice broker's reader
// stores them in runs (one commitlog write per run). Every send succeeds, and every
// message is stored once, in the queue, at the queue offset and with the offset message
// id of its SendResult.
func TestJavaAsyncBurstsAgainstSluice(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts two JVMs (the Java driver, with JSON and with binary headers); run without -short")
	}
	base := peertest.JavaDriver(t)
	b := sluiceBroker(t)
	tg := target{name: "sluice", namesrv: b.NamesrvAddr(), broker: b.Addr(), adm: newAdmin(t, b.NamesrvAddr())}
	topic := topicFor(t, "JavaBursts")
	createTopic(t, tg, topic, 4)

	const per = 400
	type result struct {
		queue  int
		offset int64
		id     string
	}
	want := map[string]result{} // body -> where its SendResult says it is
	for k, d := range []*peertest.Driver{base, base.WithJVMFlags(peertest.SerializeRocketMQ)} {
		p := d.Start(t, "produce", "--namesrv", tg.namesrv, "--mode", "async", "--group", "bursts-producer-"+strconv.Itoa(k), "--retries", "0")
		for i := range per {
			p.Send(peertest.Msg{Topic: topic, Keys: fmt.Sprintf("k%d-%d", k, i), Body: fmt.Sprintf("p%d-%d|%s", k, i, strings.Repeat("j", i%900))})
		}
		evs := p.WaitFor(90*time.Second, "every async send answered", func(evs []peertest.Event) bool { return countEvents(evs, "sent") == per })
		for _, e := range evs {
			if e.Event != "sent" {
				continue
			}
			if !e.OK || e.Status != "SEND_OK" {
				t.Fatalf("producer %d send %d: %+v", k, e.I, e)
			}
			want[fmt.Sprintf("p%d-%d", k, e.I)] = result{e.QueueID, e.QueueOffset, e.OffsetMsgID}
		}
	}

	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]result{}
	for q := range 4 {
		var off int64
		for range 10_000 { // bounded: far more pulls than messages
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := rc.InvokeSync(ctx, b.Addr(), remoting.NewRequest(remoting.PullMessage, map[string]string{
				"consumerGroup": "bursts-check", "topic": topic, "queueId": strconv.Itoa(q), "queueOffset": strconv.FormatInt(off, 10),
				"maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
				"subscription": "*", "subVersion": "0", "expressionType": "TAG"}, nil))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if resp.ResponseCode() != remoting.Success {
				break
			}
			ms, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
			if err != nil || len(ms) == 0 {
				t.Fatalf("queue %d at %d: %d messages, %v", q, off, len(ms), err)
			}
			for _, m := range ms {
				key, _, _ := strings.Cut(string(m.Body), "|")
				if _, dup := got[key]; dup {
					t.Fatalf("%s stored twice", key)
				}
				got[key] = result{q, m.QueueOffset, message.OffsetMsgID(m.StoreHost, m.CommitLogOffset)}
			}
			off += int64(len(ms))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d messages stored, %d sent", len(got), len(want))
	}
	for key, w := range want {
		if g := got[key]; g != w {
			t.Fatalf("%s: SendResult says %+v, stored %+v", key, w, g)
		}
	}
	t.Logf("%d async sends from the Java producer (JSON and binary headers): each stored once where its result says", len(want))
}
