package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Attacks on the grouped send path (handleSendGroup, remoting.Server.HandleInlineGroup,
// store.PutGroup): runs of sends mixed with other requests in one write, many
// connections at once, runs across commitlog segments, one-way and largest sends inside
// runs, refused and malformed requests inside runs.

// groupSendReq builds a SEND_MESSAGE (v2: SEND_MESSAGE_V2, short header names) for
// topic/queue with body and props.
func groupSendReq(v2 bool, topic string, queue int, body []byte, props map[string]string) *remoting.RemotingCommand {
	born := strconv.FormatInt(time.Now().UnixMilli(), 10)
	if v2 {
		return remoting.NewRequest(remoting.SendMessageV2, map[string]string{"a": "pg", "b": topic, "c": "TBW102", "d": "4",
			"e": strconv.Itoa(queue), "f": "0", "g": born, "h": "0", "i": message.MarshalProperties(props), "j": "0", "k": "false", "m": "false"}, body)
	}
	return remoting.NewRequest(remoting.SendMessage, map[string]string{"producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102",
		"defaultTopicQueueNums": "4", "queueId": strconv.Itoa(queue), "sysFlag": "0", "bornTimestamp": born, "flag": "0",
		"properties": message.MarshalProperties(props), "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "0", "batch": "false"}, body)
}

// encodeReqs encodes reqs (opaques from first, signed with cred when it has a key)
// into one buffer, for one socket write.
func encodeReqs(t *testing.T, reqs []*remoting.RemotingCommand, first int32, cred remoting.Credentials) []byte {
	t.Helper()
	out, err := encodeFrames(reqs, first, cred, remoting.SerializeJSON)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// encodeFrames is encodeReqs for a goroutine other than the test's, with headers
// encoded as st.
func encodeFrames(reqs []*remoting.RemotingCommand, first int32, cred remoting.Credentials, st remoting.SerializeType) ([]byte, error) {
	var out []byte
	for i, req := range reqs {
		req.Opaque = first + int32(i)
		if cred.AccessKey != "" {
			cred.Sign(req)
		}
		f, err := req.EncodeAs(st)
		if err != nil {
			return nil, err
		}
		out = append(out, f...)
	}
	return out, nil
}

// readAnswersFrom reads n answers from nc, by opaque; an error ends the reading early
// (the answers read so far are returned with it).
func readAnswersFrom(nc net.Conn, n int) (map[int32]*remoting.RemotingCommand, error) {
	got := make(map[int32]*remoting.RemotingCommand, n)
	for range n {
		f, err := remoting.ReadFrame(nc, 0)
		if err != nil {
			return got, err
		}
		resp, _, err := remoting.DecodeFrame(f)
		if err != nil {
			return got, err
		}
		if _, dup := got[resp.Opaque]; dup {
			return got, fmt.Errorf("two answers to opaque %d", resp.Opaque)
		}
		got[resp.Opaque] = resp
	}
	return got, nil
}

func dialBroker(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	return nc
}

// pullAll reads queue topic/queueID from offset 0 to its end and returns the messages,
// checking that each is at the offset it says.
func pullAll(t *testing.T, c *remoting.Client, addr, topic string, queueID int) []*message.MessageExt {
	t.Helper()
	var out []*message.MessageExt
	for range 100_000 { // bounded: far more pulls than messages
		resp := pull(t, c, addr, "attack-g", topic, queueID, int64(len(out)), "*", 0)
		if resp.ResponseCode() != remoting.Success {
			break
		}
		msgs, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
		if err != nil {
			t.Fatalf("queue %s/%d at %d: %v", topic, queueID, len(out), err)
		}
		if len(msgs) == 0 {
			t.Fatalf("queue %s/%d at %d: SUCCESS with no message", topic, queueID, len(out))
		}
		for _, m := range msgs {
			if m.QueueOffset != int64(len(out)) {
				t.Fatalf("queue %s/%d: message at %d says queue offset %d", topic, queueID, len(out), m.QueueOffset)
			}
			out = append(out, m)
		}
	}
	return out
}

// A run of sends followed, in the same socket write, by requests of other codes: each
// later request sees the sends before it stored (GET_MAX_OFFSET, PULL, a SEND_BATCH
// placed after them in the queue, a run of the other send code), whatever goroutine
// serves it.
func TestSendRunStoredBeforeLaterRequests(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Order", 1)
	maxOffset := func() *remoting.RemotingCommand {
		return remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": "Order", "queueId": "0"}, nil)
	}
	pullReq := remoting.NewRequest(remoting.PullMessage, map[string]string{"consumerGroup": "g", "topic": "Order", "queueId": "0",
		"queueOffset": "0", "maxMsgNums": "32", "sysFlag": strconv.Itoa(wire.PullFlagSubscription), "commitOffset": "0",
		"suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0", "expressionType": "TAG"}, nil)
	batchBody, err := message.EncodeBatch([]*message.Message{
		{Topic: "Order", Body: []byte("batch-0")}, {Topic: "Order", Body: []byte("batch-1")}, {Topic: "Order", Body: []byte("batch-2")}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	batchExt := groupSendReq(true, "Order", 0, nil, nil).ExtFields
	batchExt["m"] = "true"
	batch := remoting.NewRequest(remoting.SendBatchMessage, batchExt, batchBody)

	var reqs []*remoting.RemotingCommand
	var want []string // bodies in queue order
	add := func(v2 bool, n int) {
		for range n {
			body := "s" + strconv.Itoa(len(want))
			reqs = append(reqs, groupSendReq(v2, "Order", 0, []byte(body), nil))
			want = append(want, body)
		}
	}
	add(false, 40)
	iMax1 := len(reqs)
	reqs = append(reqs, maxOffset())
	iPull := len(reqs)
	reqs = append(reqs, pullReq)
	iBatch := len(reqs)
	reqs = append(reqs, batch)
	want = append(want, "batch-0", "batch-1", "batch-2")
	iAfter := len(reqs)
	add(true, 10)
	add(false, 10) // SEND_MESSAGE right after SEND_MESSAGE_V2: another run
	iMax2 := len(reqs)
	reqs = append(reqs, maxOffset())

	nc := dialBroker(t, b.Addr())
	if _, err := nc.Write(encodeReqs(t, reqs, 1, remoting.Credentials{})); err != nil {
		t.Fatal(err)
	}
	got, err := readAnswersFrom(nc, len(reqs))
	if err != nil {
		t.Fatalf("after %d answers: %v", len(got), err)
	}
	answer := func(i int) *remoting.RemotingCommand {
		r := got[int32(i+1)]
		if r == nil || r.ResponseCode() != remoting.Success {
			t.Fatalf("request %d (code %d): answer %+v", i, reqs[i].Code, r)
		}
		return r
	}
	// GET_MAX_OFFSET runs in a goroutine of its own, so later sends may be stored by
	// then too; the 40 before it must be.
	if off, err := strconv.Atoi(answer(iMax1).ExtFields["offset"]); err != nil || off < 40 {
		t.Fatalf("GET_MAX_OFFSET after 40 sends: %d %v", off, err)
	}
	msgs, err := message.DecodeRecords(answer(iPull).Body, message.DecodeOptions{CheckCRC: true})
	if err != nil || len(msgs) < 32 { // 32: the most a pull returns
		t.Fatalf("PULL after 40 sends: %d messages, %v", len(msgs), err)
	}
	for i, m := range msgs {
		if string(m.Body) != want[i] {
			t.Fatalf("PULL after 40 sends: message %d is %q, want %q", i, m.Body, want[i])
		}
	}
	if q := answer(iBatch).ExtFields["queueOffset"]; q != "40" {
		t.Fatalf("SEND_BATCH after 40 sends at queue offset %s", q)
	}
	for i := iAfter; i < iMax2; i++ {
		if q := answer(i).ExtFields["queueOffset"]; q != strconv.Itoa(43+i-iAfter) {
			t.Fatalf("send %d after the batch at queue offset %s, want %d", i, q, 43+i-iAfter)
		}
	}
	if off := answer(iMax2).ExtFields["offset"]; off != strconv.Itoa(len(want)) {
		t.Fatalf("GET_MAX_OFFSET at the end: %s, want %d", off, len(want))
	}
	var bodies []string
	for _, m := range pullAll(t, c, b.Addr(), "Order", 0) {
		bodies = append(bodies, string(m.Body))
	}
	if strings.Join(bodies, ",") != strings.Join(want, ",") {
		t.Fatalf("queue holds %v\nwant %v", bodies, want)
	}
}

// A counting campaign: several connections write bursts of sends at once (both send
// codes, JSON and binary headers, one-way sends, sends of the largest size, a few refused ones) to a topic
// of four queues, with commitlog segments so small that runs cross segment boundaries
// all the time; a pull held on every queue beforehand must be woken by the runs. Every
// send answered SUCCESS (and every one-way send) is in its queue exactly once, at the
// queue offset and with the message id its answer gave; queue offsets are dense;
// nothing else is stored; each stored send is counted once in the traffic counters and
// each handled send once in the send latency histogram.
func TestSendRunsFromManyConnectionsCounted(t *testing.T) {
	const maxSize = 64 << 10
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.MaxMessageSize = maxSize
		c.MappedFileSizeCommitLog = maxSize + 64<<10 // the smallest the config allows
	})
	admin := newClient(t)
	const topic, queues = "Campaign", 4
	createTopic(t, admin, b.Addr(), topic, queues)
	latencyBefore := b.traffic.sendLatency.snapshot().Count

	// Held pulls, one per queue, before anything is stored.
	type held struct {
		resp *remoting.RemotingCommand
		err  error
	}
	heldC := make(chan held, queues)
	var holds sync.WaitGroup
	for q := range queues {
		holds.Add(1)
		go func() {
			defer holds.Done()
			ext := map[string]string{"consumerGroup": "hold-g", "topic": topic, "queueId": strconv.Itoa(q), "queueOffset": "0", "maxMsgNums": "32",
				"sysFlag": strconv.Itoa(wire.PullFlagSubscription | wire.PullFlagSuspend), "commitOffset": "0", "suspendTimeoutMillis": "60000",
				"subscription": "*", "subVersion": "0", "expressionType": "TAG"}
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			r, err := admin.InvokeSync(ctx, b.Addr(), remoting.NewRequest(remoting.PullMessage, ext, nil))
			heldC <- held{r, err}
		}()
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		b.arrivals.mu.Lock()
		defer b.arrivals.mu.Unlock()
		n := 0
		for q := range queues {
			n += len(b.arrivals.waiters[queueKey{topic, int32(q)}])
		}
		return n == queues
	}, "the pulls to be held")

	type sendInfo struct {
		conn, id int
		queue    int
		oneway   bool
		bad      bool // refused: an empty body
	}
	const conns, rounds, perRound = 6, 4, 70
	type outcome struct {
		info sendInfo
		resp *remoting.RemotingCommand
	}
	results := make([][]outcome, conns)
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for cn := range conns {
		nc := dialBroker(t, b.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			opaque := int32(1)
			for r := range rounds {
				var reqs []*remoting.RemotingCommand
				var infos []sendInfo
				for i := range perRound {
					id := r*perRound + i
					info := sendInfo{conn: cn, id: id, queue: (cn + id) % queues}
					size := 100 + (id*37)%2000
					if (cn+id)%23 == 0 {
						size = maxSize
					}
					body := []byte(fmt.Sprintf("c%d-i%d|", cn, id))
					body = append(body, strings.Repeat("x", max(0, size-len(body)))...)
					switch {
					case (cn+id)%31 == 5:
						info.bad, body = true, nil
					case (cn+id)%11 == 3:
						info.oneway = true
					}
					// Runs of one code, then of the other: V2 for ids 20..39 of each round.
					req := groupSendReq(i >= 20 && i < 40, topic, info.queue, body, map[string]string{"KEYS": fmt.Sprintf("k%d-%d", cn, id)})
					if info.oneway {
						req.Flag |= remoting.FlagOneway
					}
					reqs = append(reqs, req)
					infos = append(infos, info)
				}
				st := remoting.SerializeJSON
				if cn%2 == 1 {
					st = remoting.SerializeRocketMQ // the binary header (as the Java client's serializeTypeCurrentRPC=ROCKETMQ)
				}
				out, err := encodeFrames(reqs, opaque, remoting.Credentials{}, st)
				if err != nil {
					errs <- err
					return
				}
				if _, err := nc.Write(out); err != nil {
					errs <- fmt.Errorf("conn %d round %d: write: %w", cn, r, err)
					return
				}
				answered := 0
				for _, in := range infos {
					if !in.oneway {
						answered++
					}
				}
				got, err := readAnswersFrom(nc, answered)
				if err != nil {
					errs <- fmt.Errorf("conn %d round %d: after %d answers: %w", cn, r, len(got), err)
					return
				}
				for i, in := range infos {
					resp := got[opaque+int32(i)]
					if in.oneway != (resp == nil) {
						errs <- fmt.Errorf("conn %d send %d (one-way %v): answer %+v", cn, in.id, in.oneway, resp)
						return
					}
					results[cn] = append(results[cn], outcome{in, resp})
				}
				opaque += int32(len(reqs))
			}
			errs <- nil
		}()
	}
	wg.Wait()
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The held pulls were woken by the runs (their hold lasts a minute).
	testkit.WaitFor(t, 20*time.Second, func() bool { return len(heldC) == queues }, "the held pulls to be answered")
	holds.Wait()
	for range queues {
		h := <-heldC
		if h.err != nil || h.resp.ResponseCode() != remoting.Success || len(h.resp.Body) == 0 {
			t.Fatalf("held pull: %v %+v", h.err, h.resp)
		}
	}

	// Everything in the queues, by body prefix.
	type place struct {
		queue  int
		offset int64
		msgID  string
	}
	stored := map[string]place{}
	total := 0
	for q := range queues {
		for _, m := range pullAll(t, admin, b.Addr(), topic, q) {
			key, _, ok := strings.Cut(string(m.Body), "|")
			if !ok {
				t.Fatalf("queue %d offset %d: body %.40q", q, m.QueueOffset, m.Body)
			}
			if _, dup := stored[key]; dup {
				t.Fatalf("%s stored twice", key)
			}
			stored[key] = place{q, m.QueueOffset, message.OffsetMsgID(m.StoreHost, m.CommitLogOffset)}
			total++
		}
	}
	want, answered, bad, maxSized := 0, 0, 0, 0
	for cn := range conns {
		for _, o := range results[cn] {
			key := fmt.Sprintf("c%d-i%d", cn, o.info.id)
			p, ok := stored[key]
			switch {
			case o.info.bad:
				bad++
				if ok || o.resp.ResponseCode() != remoting.MessageIllegal {
					t.Fatalf("%s (empty body): stored %v, answer %d %q", key, ok, o.resp.Code, o.resp.Remark)
				}
				continue
			case !ok:
				t.Fatalf("%s (one-way %v) lost; answer %+v", key, o.info.oneway, o.resp)
			case p.queue != o.info.queue:
				t.Fatalf("%s in queue %d, sent to %d", key, p.queue, o.info.queue)
			}
			want++
			if (cn+o.info.id)%23 == 0 {
				maxSized++
			}
			if o.info.oneway {
				continue
			}
			answered++
			r := o.resp
			if r.ResponseCode() != remoting.Success || r.ExtFields["queueId"] != strconv.Itoa(p.queue) ||
				r.ExtFields["queueOffset"] != strconv.FormatInt(p.offset, 10) || r.ExtFields["msgId"] != p.msgID {
				t.Fatalf("%s stored at %d/%d id %s; answer %d %q %v", key, p.queue, p.offset, p.msgID, r.Code, r.Remark, r.ExtFields)
			}
		}
	}
	if total != want {
		t.Fatalf("%d messages stored, %d sent to be stored", total, want)
	}
	if got := pairFor(&b.traffic.puts, topic).a.Load(); got != int64(want) {
		t.Fatalf("%d sends counted, %d stored", got, want)
	}
	if got := b.traffic.sendLatency.snapshot().Count - latencyBefore; got != uint64(conns*rounds*perRound) {
		t.Fatalf("send latency observed %d times, %d sends handled", got, conns*rounds*perRound)
	}
	segments := b.store.MaxPhyOffset()/(maxSize+64<<10) + 1
	t.Logf("%d sends: %d stored (%d answered, %d one-way, %d of %d bytes), %d refused, over %d commitlog segments",
		conns*rounds*perRound, want, answered, want-answered, maxSized, maxSize, bad, segments)
}

// A malformed frame right behind a run of sends in the same write: the connection is
// closed, and no send read before it is stored without its answer being written (a
// client that lost its connection must be able to tell what was stored from what it was
// told).
func TestSendRunThenMalformedFrame(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Bad", 1)
	for _, tc := range []struct {
		name  string
		tail  []byte
		sends int
	}{
		// A frame whose header length runs past the frame: a header error.
		{"bad header length", func() []byte {
			f := make([]byte, 12)
			binary.BigEndian.PutUint32(f[0:], 8)
			binary.BigEndian.PutUint32(f[4:], 1000) // JSON header of 1000 bytes in an 8-byte frame
			return f
		}(), 30},
		// A length below the minimum (and nothing after it: bytes left unread when the
		// broker closes would make its kernel reset the connection, which may discard
		// answers the client has not read yet).
		{"short length", []byte{0, 0, 0, 2}, 30},
		// A JSON header that is not JSON.
		{"junk header", func() []byte {
			f := make([]byte, 8, 16)
			binary.BigEndian.PutUint32(f[0:], 4+6)
			binary.BigEndian.PutUint32(f[4:], 6)
			return append(f, "{junk!"...)
		}(), 30},
		// More sends than one run holds, so that a whole run is handed over first.
		{"after a full run", []byte{0, 0, 0, 2}, 70},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.store.MaxOffset("Bad", 0)
			var reqs []*remoting.RemotingCommand
			for i := range tc.sends {
				reqs = append(reqs, groupSendReq(i%2 == 0 && tc.sends > 64, "Bad", 0, []byte(tc.name+strconv.Itoa(i)), nil))
			}
			// A request of another code between the runs too.
			reqs = append(reqs[:10], append([]*remoting.RemotingCommand{
				remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": "Bad", "queueId": "0"}, nil)}, reqs[10:]...)...)
			out := append(encodeReqs(t, reqs, 1, remoting.Credentials{}), tc.tail...)
			nc := dialBroker(t, b.Addr())
			if _, err := nc.Write(out); err != nil {
				t.Fatal(err)
			}
			got, err := readAnswersFrom(nc, len(reqs)+1)
			if err != io.EOF {
				t.Fatalf("after %d answers: %v, want the connection closed", len(got), err)
			}
			answeredSends := 0
			for i, req := range reqs {
				r := got[int32(i+1)]
				if r == nil || req.Code == int16(remoting.GetMaxOffset) {
					continue
				}
				if r.ResponseCode() != remoting.Success {
					t.Fatalf("send %d answered %d %q", i, r.Code, r.Remark)
				}
				answeredSends++
			}
			stored := int(b.store.MaxOffset("Bad", 0) - before)
			if stored != answeredSends {
				t.Fatalf("%d sends stored, %d answered (of %d read before the malformed frame)", stored, answeredSends, tc.sends)
			}
			t.Logf("%d sends before the malformed frame: %d stored and answered", tc.sends, stored)
		})
	}
}

// With ACL on, a run of sends holds refused ones (unsigned, a bad signature, a topic the
// account may not publish to) between accepted ones: each refused send gets its own
// refusal and is not stored, the accepted ones are stored in order with their own
// answers.
func TestSendRunWithACLRefusals(t *testing.T) {
	b, _ := startACLBroker(t, "", func(c *Config) { c.AccessKey, c.SecretKey = "adminKey", "adminSecret" })
	admin := signedClient(t, "adminKey", "adminSecret")
	createTopic(t, admin, b.Addr(), "Orders", 1)
	createTopic(t, admin, b.Addr(), "Secret", 1)
	good := remoting.Credentials{AccessKey: "producerKey", SecretKey: "producerSecret"}
	wrong := remoting.Credentials{AccessKey: "producerKey", SecretKey: "nope"}

	var out []byte
	type sent struct {
		body string
		why  string // the refusal's remark, "" for stored
	}
	var sends []sent
	for i := range 48 {
		body := "o" + strconv.Itoa(i)
		topic, cred, why := "Orders", good, ""
		switch i % 8 {
		case 2:
			cred, why = remoting.Credentials{}, "no accessKey"
		case 4:
			cred, why = wrong, "check signature failed"
		case 6:
			topic, why = "Secret", "no PUB permission on topic Secret"
		}
		out = append(out, encodeReqs(t, []*remoting.RemotingCommand{groupSendReq(i%16 >= 8, topic, 0, []byte(body), nil)}, int32(i+1), cred)...)
		sends = append(sends, sent{body, why})
	}
	nc := dialBroker(t, b.Addr())
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	got, err := readAnswersFrom(nc, len(sends))
	if err != nil {
		t.Fatalf("after %d answers: %v", len(got), err)
	}
	var want []string
	next := 0
	for i, s := range sends {
		r := got[int32(i+1)]
		if s.why != "" {
			if r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, s.why) {
				t.Fatalf("send %d: want a refusal %q, got %d %q", i, s.why, r.Code, r.Remark)
			}
			continue
		}
		if r.ResponseCode() != remoting.Success || r.ExtFields["queueOffset"] != strconv.Itoa(next) {
			t.Fatalf("send %d: answer %d %q %v, want queue offset %d", i, r.Code, r.Remark, r.ExtFields, next)
		}
		next++
		want = append(want, s.body)
	}
	var bodies []string
	for _, m := range pullAll(t, admin, b.Addr(), "Orders", 0) {
		bodies = append(bodies, string(m.Body))
	}
	if strings.Join(bodies, ",") != strings.Join(want, ",") {
		t.Fatalf("Orders holds %v, want %v", bodies, want)
	}
	if n := b.store.MaxOffset("Secret", 0); n != 0 {
		t.Fatalf("%d refused sends stored in Secret", n)
	}
	if got := pairFor(&b.traffic.puts, "Orders").a.Load(); got != int64(len(want)) {
		t.Fatalf("%d sends counted, %d stored", got, len(want))
	}
}

// Shutdown while connections write bursts of sends: it returns, every answer that came
// is a whole answer (SUCCESS or an error code), and after a restart on the same store
// every send answered SUCCESS is there exactly once, at the queue offset its answer
// gave. (goleak, in TestMain, checks that no goroutine is left.)
func TestShutdownDuringSendRuns(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *Config) { c.MaxMessageSize, c.MappedFileSizeCommitLog = 64<<10, 1<<20 }
	b := startBroker(t, dir, mod)
	admin := newClient(t)
	const topic, conns = "Stop", 4
	createTopic(t, admin, b.Addr(), topic, 2)

	type acked struct {
		key    string
		queue  int
		offset string
	}
	var (
		mu      sync.Mutex
		ok      []acked
		refused = map[remoting.ResponseCode]int{}
		bursts  int
	)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for cn := range conns {
		nc := dialBroker(t, b.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			opaque := int32(1)
			for r := 0; r < 10_000; r++ { // bounded; ends at the first connection error
				select {
				case <-stop:
					return
				default:
				}
				var reqs []*remoting.RemotingCommand
				for i := range 64 {
					key := fmt.Sprintf("c%d-r%d-i%d", cn, r, i)
					reqs = append(reqs, groupSendReq(i%3 == 0, topic, i%2, []byte(key+"|"+strings.Repeat("y", 200)), nil))
				}
				out, err := encodeFrames(reqs, opaque, remoting.Credentials{}, remoting.SerializeJSON)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := nc.Write(out); err != nil {
					return
				}
				got, err := readAnswersFrom(nc, len(reqs))
				mu.Lock()
				for i := range reqs {
					resp := got[opaque+int32(i)]
					switch {
					case resp == nil:
					case resp.ResponseCode() == remoting.Success:
						ok = append(ok, acked{fmt.Sprintf("c%d-r%d-i%d", cn, r, i), i % 2, resp.ExtFields["queueOffset"]})
					default:
						refused[resp.ResponseCode()]++
					}
				}
				if err == nil {
					bursts++
				}
				mu.Unlock()
				if err != nil {
					return
				}
				opaque += int32(len(reqs))
			}
		}()
	}
	testkit.WaitFor(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return bursts >= 3*conns
	}, "bursts to be answered")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err := b.Shutdown(ctx)
	cancel()
	if err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	close(stop)
	wg.Wait()

	b2 := startBroker(t, dir, mod)
	stored := map[string]string{} // key -> queue/offset
	for q := range 2 {
		for _, m := range pullAll(t, admin, b2.Addr(), topic, q) {
			key, _, _ := strings.Cut(string(m.Body), "|")
			if prev, dup := stored[key]; dup {
				t.Fatalf("%s stored twice (%s and %d/%d)", key, prev, q, m.QueueOffset)
			}
			stored[key] = fmt.Sprintf("%d/%d", q, m.QueueOffset)
		}
	}
	for _, a := range ok {
		if where, found := stored[a.key]; !found || where != fmt.Sprintf("%d/%s", a.queue, a.offset) {
			t.Fatalf("%s answered SUCCESS at %d/%s, stored at %q (found %v)", a.key, a.queue, a.offset, where, found)
		}
	}
	for code := range refused {
		if code != remoting.SystemBusy && code != remoting.ServiceNotAvailable && code != remoting.SystemError {
			t.Fatalf("answers during shutdown: %v", refused)
		}
	}
	t.Logf("%d sends answered SUCCESS, %d stored in all, refused %v", len(ok), len(stored), refused)
}

// Sends of the largest size (the default 4 MiB maxMessageSize) and one byte over it in
// the middle of a burst of small ones, with 8 MiB commitlog segments (two largest
// sends never share one): the oversized one alone is refused, every other is stored in
// order, whole, at the queue offset its answer gave.
func TestSendRunWithLargestSends(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Large", 1)
	largest := b.cfg.MaxMessageSize
	var reqs []*remoting.RemotingCommand
	var sizes []int
	for i := range 40 {
		size := 100 + i
		switch i % 10 {
		case 4:
			size = largest
		case 7:
			if i == 17 {
				size = largest + 1
			}
		}
		body := []byte(fmt.Sprintf("%02d|", i))
		body = append(body, strings.Repeat("L", size-len(body))...)
		reqs = append(reqs, groupSendReq(i%3 == 0, "Large", 0, body, nil))
		sizes = append(sizes, size)
	}
	nc := dialBroker(t, b.Addr())
	out := encodeReqs(t, reqs, 1, remoting.Credentials{})
	go func() { _, _ = nc.Write(out) }() // the broker answers while this is written
	got, err := readAnswersFrom(nc, len(reqs))
	if err != nil {
		t.Fatalf("after %d answers: %v", len(got), err)
	}
	var want []int // indexes stored, in order
	for i := range reqs {
		r := got[int32(i+1)]
		if sizes[i] > largest {
			if r.ResponseCode() != remoting.MessageIllegal {
				t.Fatalf("send %d of %d bytes: %d %q", i, sizes[i], r.Code, r.Remark)
			}
			continue
		}
		if r.ResponseCode() != remoting.Success || r.ExtFields["queueOffset"] != strconv.Itoa(len(want)) {
			t.Fatalf("send %d of %d bytes: %d %q %v, want queue offset %d", i, sizes[i], r.Code, r.Remark, r.ExtFields, len(want))
		}
		want = append(want, i)
	}
	msgs := pullAll(t, c, b.Addr(), "Large", 0)
	if len(msgs) != len(want) {
		t.Fatalf("%d messages stored, %d sent to be stored", len(msgs), len(want))
	}
	for k, m := range msgs {
		i := want[k]
		if len(m.Body) != sizes[i] || string(m.Body[:3]) != fmt.Sprintf("%02d|", i) {
			t.Fatalf("message %d: %d bytes %.3q, want send %d of %d bytes", k, len(m.Body), m.Body, i, sizes[i])
		}
	}
}

// A run never waits for the network: sends followed by the first half of another one in
// the same write are stored and answered while the rest of that frame has not come; the
// rest then completes it.
func TestSendRunAnsweredBeforePartialFrame(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Partial", 1)
	var reqs []*remoting.RemotingCommand
	for i := range 21 {
		reqs = append(reqs, groupSendReq(false, "Partial", 0, []byte("p"+strconv.Itoa(i)), nil))
	}
	out := encodeReqs(t, reqs, 1, remoting.Credentials{})
	last, err := reqs[20].Encode()
	if err != nil {
		t.Fatal(err)
	}
	cut := len(out) - len(last)/2 // inside the last frame
	nc := dialBroker(t, b.Addr())
	if _, err := nc.Write(out[:cut]); err != nil {
		t.Fatal(err)
	}
	got, err := readAnswersFrom(nc, 20)
	if err != nil {
		t.Fatalf("after %d answers: %v", len(got), err)
	}
	for i := range 20 {
		if r := got[int32(i+1)]; r == nil || r.ResponseCode() != remoting.Success || r.ExtFields["queueOffset"] != strconv.Itoa(i) {
			t.Fatalf("send %d: %+v", i, r)
		}
	}
	if _, err := nc.Write(out[cut:]); err != nil {
		t.Fatal(err)
	}
	got, err = readAnswersFrom(nc, 1)
	if r := got[21]; err != nil || r == nil || r.ResponseCode() != remoting.Success || r.ExtFields["queueOffset"] != "20" {
		t.Fatalf("the completed send: %+v %v", r, err)
	}
}

// Bursts of sends with random header values (queue ids, sys flags, timestamps,
// reconsume counts, property strings with stray separators and NULs) and bodies: the
// broker answers each on its own without a handler panic, and every send answered
// SUCCESS is readable at the queue offset its answer gave.
func TestSendRunsOfOddSends(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Odd", 4)
	rng := rand.New(rand.NewPCG(7, 7))
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	randStr := func(n int) string {
		const alphabet = "ab\x01\x02=:;, \x00é"
		var sb strings.Builder
		for range rng.IntN(n) {
			sb.WriteString(string([]rune(alphabet)[rng.IntN(len([]rune(alphabet)))]))
		}
		return sb.String()
	}
	nc := dialBroker(t, b.Addr())
	opaque := int32(1)
	type okSend struct {
		queue  string
		offset string
		body   string
	}
	var oks []okSend
	answers := map[remoting.ResponseCode]int{}
	for round := range 20 {
		var reqs []*remoting.RemotingCommand
		for i := range 50 {
			props := map[string]string{}
			for range rng.IntN(4) {
				props[randStr(6)] = randStr(10)
			}
			if rng.IntN(4) == 0 {
				props[pick(message.PropertyDelayTimeLevel, message.PropertyTransactionPrepared, message.PropertyProducerGroup, "TAGS", "KEYS",
					message.PropertyUniqClientMessageIDKeyIdx, message.PropertyRealTopic, message.PropertyRealQueueID)] = pick("1", "99", "-1", "true", "", "x\x00y", "18")
			}
			req := groupSendReq(rng.IntN(2) == 0, "Odd", 0, []byte(fmt.Sprintf("odd-%d-%d|%s", round, i, randStr(40))), nil)
			set := func(long, short, v string) {
				if _, ok := req.ExtFields[long]; ok {
					req.ExtFields[long] = v
				} else {
					req.ExtFields[short] = v
				}
			}
			set("properties", "i", message.MarshalProperties(props)+pick("", "", "", "\x02", "\x01", "=\x02"))
			if rng.IntN(6) == 0 {
				set("queueId", "e", pick("0", "1", "3", "4", "-1", "2147483647", "x", ""))
			}
			if rng.IntN(6) == 0 {
				set("sysFlag", "f", pick("0", "0", "1", "2", "4", "8", "12", "64", "-1", "x"))
			}
			if rng.IntN(6) == 0 {
				set("bornTimestamp", "g", pick("0", "-1", "x", "9223372036854775807", strconv.FormatInt(time.Now().UnixMilli(), 10)))
			}
			if rng.IntN(6) == 0 {
				set("reconsumeTimes", "j", pick("0", "1", "-5", "100000", "x"))
			}
			if rng.IntN(6) == 0 {
				set("flag", "h", pick("0", "-1", "2147483647", "x"))
			}
			if rng.IntN(10) == 0 {
				set("topic", "b", pick("%RETRY%g", "%DLQ%g", "TBW102", "Odd", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"))
			}
			if rng.IntN(20) == 0 {
				req.Body = nil
			}
			reqs = append(reqs, req)
		}
		out := encodeReqs(t, reqs, opaque, remoting.Credentials{})
		if _, err := nc.Write(out); err != nil {
			t.Fatal(err)
		}
		got, err := readAnswersFrom(nc, len(reqs))
		if err != nil {
			t.Fatalf("round %d: after %d answers: %v", round, len(got), err)
		}
		for i, req := range reqs {
			r := got[opaque+int32(i)]
			answers[r.ResponseCode()]++
			if strings.Contains(r.Remark, "panic") {
				t.Fatalf("round %d send %d %v: %d %q", round, i, req.ExtFields, r.Code, r.Remark)
			}
			topic := req.ExtFields["topic"] + req.ExtFields["b"]
			if r.ResponseCode() == remoting.Success && topic == "Odd" && !strings.Contains(req.ExtFields["properties"]+req.ExtFields["i"], message.PropertyDelayTimeLevel) &&
				!strings.Contains(req.ExtFields["properties"]+req.ExtFields["i"], message.PropertyTransactionPrepared) {
				oks = append(oks, okSend{r.ExtFields["queueId"], r.ExtFields["queueOffset"], string(req.Body)})
			}
		}
		opaque += int32(len(reqs))
	}
	stored := map[string]string{}
	for q := range 4 {
		for _, m := range pullAll(t, c, b.Addr(), "Odd", q) {
			stored[fmt.Sprintf("%d/%d", q, m.QueueOffset)] = string(m.Body)
		}
	}
	for _, o := range oks {
		if body, ok := stored[o.queue+"/"+o.offset]; !ok || body != o.body {
			t.Fatalf("send answered SUCCESS at %s/%s: stored %q", o.queue, o.offset, body)
		}
	}
	t.Logf("1000 odd sends: answers by code %v; %d plain ones checked against the queues", answers, len(oks))
}
