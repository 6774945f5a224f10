package broker

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// A burst of sends written at once reaches the broker's reader as runs of requests
// (handleSendGroup, one store.PutGroup per run). Each send is answered as if it had come
// alone: good ones SUCCESS with their own queue offset (consecutive per queue, readable
// by a pull), bad ones their own error, delayed and transactional ones parked where
// they belong; and each stored send is counted once.
func TestSendBurstAnsweredPerMessage(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Burst", 2)

	type sent struct {
		body  string
		queue int
		props map[string]string
		want  remoting.ResponseCode
	}
	var sends []sent
	for i := range 60 {
		sends = append(sends, sent{body: "m" + strconv.Itoa(i), queue: i % 2, want: remoting.Success})
		switch i {
		case 10:
			sends = append(sends, sent{body: "", queue: 0, want: remoting.MessageIllegal}) // empty body
		case 20:
			sends = append(sends, sent{body: "delayed", queue: 1, props: map[string]string{message.PropertyDelayTimeLevel: "3"}, want: remoting.Success})
		case 30:
			sends = append(sends, sent{body: "half", queue: 0, props: map[string]string{message.PropertyTransactionPrepared: "true", message.PropertyProducerGroup: "pg"}, want: remoting.Success})
		case 40:
			sends = append(sends, sent{body: "bad-flag", queue: 0, props: map[string]string{message.PropertyTransactionPrepared: "true"}, want: remoting.MessageIllegal}) // no PGROUP
		}
	}
	var out []byte
	for i, s := range sends {
		sysFlag := "0"
		if s.props[message.PropertyTransactionPrepared] == "true" {
			sysFlag = "4"
		}
		req := remoting.NewRequest(remoting.SendMessage, map[string]string{
			"producerGroup": "pg", "topic": "Burst", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
			"queueId": strconv.Itoa(s.queue), "sysFlag": sysFlag, "bornTimestamp": strconv.FormatInt(time.Now().UnixMilli(), 10),
			"flag": "0", "properties": message.MarshalProperties(s.props), "reconsumeTimes": "0", "unitMode": "false",
		}, []byte(s.body))
		req.Opaque = int32(i + 1)
		f, err := req.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f...)
	}
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	answers := map[int32]*remoting.RemotingCommand{}
	for range sends {
		f, err := remoting.ReadFrame(nc, 0)
		if err != nil {
			t.Fatalf("after %d answers: %v", len(answers), err)
		}
		resp, _, err := remoting.DecodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		answers[resp.Opaque] = resp
	}
	next := map[int]int64{} // the next queue offset of each queue of Burst
	stored := 0
	for i, s := range sends {
		resp := answers[int32(i+1)]
		if resp == nil || resp.ResponseCode() != s.want {
			t.Fatalf("send %d (%q): answer %+v, want code %d", i, s.body, resp, s.want)
		}
		if s.want != remoting.Success {
			continue
		}
		stored++
		if q := resp.ExtFields["queueId"]; q != strconv.Itoa(s.queue) {
			t.Fatalf("send %d answered queueId %s, want %d", i, q, s.queue)
		}
		if s.props != nil { // parked: the delay queue or the half-message queue
			continue
		}
		if off := resp.ExtFields["queueOffset"]; off != strconv.FormatInt(next[s.queue], 10) {
			t.Fatalf("send %d (%s) answered queueOffset %s, want %d", i, s.body, off, next[s.queue])
		}
		next[s.queue]++
	}
	for q := range 2 {
		var got []string
		for off := int64(0); off < next[q]; {
			resp := pull(t, c, b.Addr(), "g", "Burst", q, off, "*", 0)
			if resp.ResponseCode() != remoting.Success {
				t.Fatalf("pull queue %d at %d: %d %s", q, off, resp.Code, resp.Remark)
			}
			msgs, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				got = append(got, string(m.Body))
			}
			off += int64(len(msgs))
		}
		var want []string
		for _, s := range sends {
			if s.queue == q && s.want == remoting.Success && s.props == nil {
				want = append(want, s.body)
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("queue %d holds %v, want %v", q, got, want)
		}
	}
	if n := b.store.MaxOffset(message.TransHalfTopic, 0); n != 1 {
		t.Fatalf("%d half messages stored, want 1", n)
	}
	if n := b.store.MaxOffset(message.ScheduleTopic, 2); n != 1 { // delay level 3: queue 2
		t.Fatalf("%d delayed messages parked, want 1", n)
	}
	if got := pairFor(&b.traffic.puts, "Burst").a.Load(); got != int64(stored) {
		t.Fatalf("%d sends counted, %d stored", got, stored)
	}
}
