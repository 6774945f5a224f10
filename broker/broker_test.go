package broker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startBroker runs a broker with an embedded name server on free loopback ports.
func startBroker(t *testing.T, dir string, mod func(*Config)) *Broker {
	t.Helper()
	cfg := Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0", StorePathRootDir: dir,
		MappedFileSizeCommitLog: 8 << 20, Logger: testkit.Quiet()}
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	return b
}

func newClient(t *testing.T) *remoting.Client {
	t.Helper()
	c, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func invoke(t *testing.T, c *remoting.Client, addr string, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.InvokeSync(ctx, addr, req)
	if err != nil {
		t.Fatalf("invoke %d: %v", req.Code, err)
	}
	return resp
}

// sendV1 sends one message with SEND_MESSAGE (10) and the long header, as the Go client does.
func sendV1(t *testing.T, c *remoting.Client, addr, topic string, queueID int, body []byte, props map[string]string) *remoting.RemotingCommand {
	t.Helper()
	ext := map[string]string{
		"producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": strconv.Itoa(queueID), "sysFlag": "0", "bornTimestamp": strconv.FormatInt(time.Now().UnixMilli(), 10),
		"flag": "0", "properties": message.MarshalProperties(props), "reconsumeTimes": "0", "unitMode": "false",
		"maxReconsumeTimes": "0", "batch": "false",
	}
	return invoke(t, c, addr, remoting.NewRequest(remoting.SendMessage, ext, body))
}

func pull(t *testing.T, c *remoting.Client, addr, group, topic string, queueID int, offset int64, sub string, suspendMs int) *remoting.RemotingCommand {
	t.Helper()
	sysFlag := wire.PullFlagSubscription
	if suspendMs > 0 {
		sysFlag |= wire.PullFlagSuspend
	}
	ext := map[string]string{
		"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(queueID), "queueOffset": strconv.FormatInt(offset, 10),
		"maxMsgNums": "32", "sysFlag": strconv.Itoa(sysFlag), "commitOffset": "0", "suspendTimeoutMillis": strconv.Itoa(suspendMs),
		"subscription": sub, "subVersion": "0", "expressionType": "TAG",
	}
	return invoke(t, c, addr, remoting.NewRequest(remoting.PullMessage, ext, nil))
}

func createTopic(t *testing.T, c *remoting.Client, addr, topic string, queues int) {
	t.Helper()
	q := strconv.Itoa(queues)
	resp := invoke(t, c, addr, remoting.NewRequest(remoting.UpdateAndCreateTopic, map[string]string{
		"topic": topic, "defaultTopic": "TBW102", "readQueueNums": q, "writeQueueNums": q, "perm": "6",
		"topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, nil))
	if resp.ResponseCode() != remoting.Success {
		t.Fatalf("create topic: %d %s", resp.Code, resp.Remark)
	}
}

func TestSendPullTagsAndLongPolling(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Orders", 1)
	for i, tag := range []string{"TagA", "TagB", "TagC", "TagA"} {
		resp := sendV1(t, c, b.Addr(), "Orders", 0, []byte("m"+strconv.Itoa(i)), map[string]string{"TAGS": tag, "KEYS": "k" + strconv.Itoa(i)})
		if resp.ResponseCode() != remoting.Success || resp.ExtFields["queueOffset"] != strconv.Itoa(i) || len(resp.ExtFields["msgId"]) != 32 {
			t.Fatalf("send %d: code %d remark %q ext %v", i, resp.Code, resp.Remark, resp.ExtFields)
		}
	}
	resp := pull(t, c, b.Addr(), "g1", "Orders", 0, 0, "TagA || TagC", 0)
	if resp.ResponseCode() != remoting.Success {
		t.Fatalf("pull: %d %s", resp.Code, resp.Remark)
	}
	msgs, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.Tag()+":"+string(m.Body))
		if m.Property(message.PropertyCluster) != "DefaultCluster" || m.StoreHost.String() != b.Addr() {
			t.Fatalf("stored message lacks CLUSTER or store host: %+v", m)
		}
	}
	if want := "[TagA:m0 TagC:m2 TagA:m3]"; fmtList(got) != want {
		t.Fatalf("got %v want %s", got, want)
	}
	if resp.ExtFields["nextBeginOffset"] != "4" || resp.ExtFields["maxOffset"] != "4" || resp.ExtFields["minOffset"] != "0" {
		t.Fatalf("offsets %v", resp.ExtFields)
	}

	// Long polling: a pull at the end of the queue is held until the next message arrives.
	var held atomic.Value
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		held.Store(pull(t, c, b.Addr(), "g1", "Orders", 0, 4, "*", 20000))
	}()
	testkit.WaitFor(t, 5*time.Second, func() bool { return time.Since(start) > 200*time.Millisecond }, "the pull to be held")
	select {
	case <-done:
		t.Fatal("pull at the end of the queue answered before any message arrived")
	default:
	}
	sendV1(t, c, b.Addr(), "Orders", 0, []byte("late"), map[string]string{"TAGS": "TagB"})
	<-done
	r := held.Load().(*remoting.RemotingCommand)
	if r.ResponseCode() != remoting.Success || time.Since(start) > 15*time.Second {
		t.Fatalf("held pull: code %d after %v", r.Code, time.Since(start))
	}
	late, _ := message.DecodeRecords(r.Body, message.DecodeOptions{})
	if len(late) != 1 || string(late[0].Body) != "late" {
		t.Fatalf("held pull returned %v", late)
	}

	// Offsets: beyond the end -> OFFSET_MOVED; short hold with no message -> PULL_NOT_FOUND.
	if r := pull(t, c, b.Addr(), "g1", "Orders", 0, 99, "*", 0); r.ResponseCode() != remoting.PullOffsetMoved || r.ExtFields["nextBeginOffset"] != "5" {
		t.Fatalf("offset beyond end: %d %v", r.Code, r.ExtFields)
	}
	if r := pull(t, c, b.Addr(), "g1", "Orders", 0, 5, "*", 300); r.ResponseCode() != remoting.PullNotFound || r.ExtFields["nextBeginOffset"] != "5" {
		t.Fatalf("held pull with no message: %d %v", r.Code, r.ExtFields)
	}
	// A queue id out of range is refused, as are unknown topics.
	if r := pull(t, c, b.Addr(), "g1", "Orders", 7, 0, "*", 0); r.ResponseCode() != remoting.SystemError {
		t.Fatalf("bad queue id: %d", r.Code)
	}
	if r := pull(t, c, b.Addr(), "g1", "Nope", 0, 0, "*", 0); r.ResponseCode() != remoting.TopicNotExist {
		t.Fatalf("unknown topic: %d", r.Code)
	}
}

func fmtList(s []string) string {
	b, _ := json.Marshal(s)
	out := string(b)
	out = "[" + out[1:len(out)-1] + "]"
	r := []byte{}
	for _, ch := range []byte(out) {
		if ch != '"' {
			if ch == ',' {
				ch = ' '
			}
			r = append(r, ch)
		}
	}
	return string(r)
}

func TestAutoCreateTopicAndForbiddenTopics(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	resp := sendV1(t, c, b.Addr(), "AutoT", 0, []byte("x"), nil)
	if resp.ResponseCode() != remoting.Success {
		t.Fatalf("auto-create send: %d %s", resp.Code, resp.Remark)
	}
	if tc := b.topics.get("AutoT"); tc == nil || tc.WriteQueueNums != 4 || tc.Perm != 6 {
		t.Fatalf("auto-created topic config %+v", tc)
	}
	if r := sendV1(t, c, b.Addr(), message.ScheduleTopic, 0, []byte("x"), nil); r.ResponseCode() != remoting.NoPermission {
		t.Fatalf("send to system topic: %d", r.Code)
	}
	if r := sendV1(t, c, b.Addr(), "bad topic", 0, []byte("x"), nil); r.ResponseCode() != remoting.SystemError {
		t.Fatalf("send to invalid topic: %d", r.Code)
	}

	// A DLQ topic created by a plain send is write-only, like one made by send-back.
	dlq := message.DLQTopic("orphans")
	if r := sendV1(t, c, b.Addr(), dlq, 0, []byte("x"), nil); r.ResponseCode() != remoting.Success {
		t.Fatalf("send to a new DLQ topic: %d %s", r.Code, r.Remark)
	}
	if tc := b.topics.get(dlq); tc == nil || tc.Perm != permWrite || tc.WriteQueueNums != 1 {
		t.Fatalf("DLQ topic config %+v", tc)
	}
	if r := pull(t, c, b.Addr(), "g", dlq, 0, 0, "*", 0); r.ResponseCode() != remoting.NoPermission {
		t.Fatalf("pull from a DLQ: %d", r.Code)
	}

	off := startBroker(t, t.TempDir(), func(c *Config) { c.AutoCreateTopicEnable = boolPtr(false) })
	r := sendV1(t, c, off.Addr(), "AutoT", 0, []byte("x"), nil)
	if r.ResponseCode() != remoting.TopicNotExist {
		t.Fatalf("auto-create off: want 17, got %d %s", r.Code, r.Remark)
	}
}

func TestBatchSend(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "B", 1)
	var msgs []*message.Message
	for i := 0; i < 3; i++ {
		msgs = append(msgs, (&message.Message{Topic: "B", Body: []byte("b" + strconv.Itoa(i))}).SetTag("T"+strconv.Itoa(i)))
	}
	body, err := message.EncodeBatch(msgs, 0)
	if err != nil {
		t.Fatal(err)
	}
	ext := map[string]string{"a": "pg", "b": "B", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0", "i": "", "j": "0", "k": "false", "m": "true"}
	resp := invoke(t, c, b.Addr(), remoting.NewRequest(remoting.SendBatchMessage, ext, body))
	if resp.ResponseCode() != remoting.Success || resp.ExtFields["queueOffset"] != "0" {
		t.Fatalf("batch: %d %s %v", resp.Code, resp.Remark, resp.ExtFields)
	}
	ids := resp.ExtFields["msgId"]
	if n := len(ids); n != 3*32+2 {
		t.Fatalf("batch msgId %q", ids)
	}
	r := pull(t, c, b.Addr(), "g", "B", 0, 0, "T1", 0)
	got, _ := message.DecodeRecords(r.Body, message.DecodeOptions{})
	if len(got) != 1 || string(got[0].Body) != "b1" || got[0].QueueOffset != 1 {
		t.Fatalf("pull batch member: %+v", got)
	}
}

// rawFrame builds a frame from a raw header and body.
func rawFrame(header []byte, body []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)+len(body)))
	out = binary.BigEndian.AppendUint32(out, uint32(len(header)))
	out = append(out, header...)
	return append(out, body...)
}

// TestBadInputKeepsServingOthers feeds malformed frames on raw connections while a
// well-behaved client keeps sending; each bad connection gets an error response or is
// closed, and the good client is served throughout.
func TestBadInputKeepsServingOthers(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	good := newClient(t)
	createTopic(t, good, b.Addr(), "Good", 1)

	stop := make(chan struct{})
	var sent, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 100000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ext := map[string]string{"producerGroup": "pg", "topic": "Good", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
				"queueId": "0", "sysFlag": "0", "bornTimestamp": "1", "flag": "0"}
			resp, err := good.InvokeSync(ctx, b.Addr(), remoting.NewRequest(remoting.SendMessage, ext, []byte("ok")))
			cancel()
			if err != nil || resp.ResponseCode() != remoting.Success {
				failed.Add(1)
				continue
			}
			sent.Add(1)
		}
	}()

	closedOrAnswered := func(name string, frame []byte) *remoting.RemotingCommand {
		t.Helper()
		conn, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write(frame); err != nil {
			return nil // already closed by the broker
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := remoting.ReadFrame(conn, 64<<20)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%s: connection neither answered nor closed", name)
			}
			return nil // closed
		}
		cmd, _, err := remoting.DecodeFrame(f)
		if err != nil {
			t.Fatalf("%s: undecodable answer: %v", name, err)
		}
		return cmd
	}
	neg := binary.BigEndian.AppendUint32(nil, 0xFFFFFFF0)
	if r := closedOrAnswered("negative length", append(neg, 0, 0, 0, 0)); r != nil {
		t.Fatalf("negative length answered %+v", r)
	}
	huge := binary.BigEndian.AppendUint32(nil, 1<<30)
	if r := closedOrAnswered("length over max", append(huge, 0, 0, 0, 0)); r != nil {
		t.Fatalf("oversized length answered %+v", r)
	}
	trunc := binary.BigEndian.AppendUint32(nil, 8)
	trunc = binary.BigEndian.AppendUint32(trunc, 200) // header longer than the frame
	if r := closedOrAnswered("truncated header", append(trunc, '{', '}', 0, 0)); r != nil {
		t.Fatalf("truncated header answered %+v", r)
	}
	if r := closedOrAnswered("invalid json", rawFrame([]byte(`{"code":10,"opaque":`), nil)); r != nil {
		t.Fatalf("invalid JSON answered %+v", r)
	}
	unknown, _ := remoting.NewRequest(remoting.RequestCode(9999), nil, nil).Encode()
	if r := closedOrAnswered("unknown code", unknown); r == nil || r.ResponseCode() != remoting.RequestCodeNotSupported {
		t.Fatalf("unknown code: %+v", r)
	}
	ext := map[string]string{"producerGroup": "pg", "topic": "Good", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": "0", "sysFlag": "0", "bornTimestamp": "1", "flag": "0"}
	big, _ := remoting.NewRequest(remoting.SendMessage, ext, make([]byte, 5<<20)).Encode()
	if r := closedOrAnswered("5 MiB message", big); r == nil || r.ResponseCode() != remoting.MessageIllegal {
		t.Fatalf("5 MiB message: %+v", r)
	}
	missing, _ := remoting.NewRequest(remoting.SendMessage, map[string]string{"topic": "Good"}, []byte("x")).Encode()
	if r := closedOrAnswered("missing header field", missing); r == nil || r.ResponseCode() != remoting.SystemError {
		t.Fatalf("missing fields: %+v", r)
	}

	before := sent.Load()
	testkit.WaitFor(t, 10*time.Second, func() bool { return sent.Load() > before+20 }, "the good client to keep being served")
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("the well-behaved client saw %d failures", failed.Load())
	}
}

// TestRestartKeepsTopicsAndOffsets: committed offsets and topic configs survive a restart.
func TestRestartKeepsTopicsAndOffsets(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Keep", 2)
	for i := 0; i < 10; i++ {
		sendV1(t, c, b.Addr(), "Keep", i%2, []byte("v"+strconv.Itoa(i)), nil)
	}
	upd := remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "Keep", "queueId": "1", "commitOffset": "3"}, nil)
	if r := invoke(t, c, b.Addr(), upd); r.ResponseCode() != remoting.Success {
		t.Fatal(r.Remark)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, nil)
	if tc := b2.topics.get("Keep"); tc == nil || tc.ReadQueueNums != 2 {
		t.Fatalf("topic lost: %+v", tc)
	}
	q := remoting.NewRequest(remoting.QueryConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "Keep", "queueId": "1"}, nil)
	if r := invoke(t, c, b2.Addr(), q); r.ResponseCode() != remoting.Success || r.ExtFields["offset"] != "3" {
		t.Fatalf("offset after restart: %d %v", r.Code, r.ExtFields)
	}
	q0 := remoting.NewRequest(remoting.QueryConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "Keep", "queueId": "0"}, nil)
	if r := invoke(t, c, b2.Addr(), q0); r.ResponseCode() != remoting.QueryNotFound {
		t.Fatalf("no offset must be QUERY_NOT_FOUND, got %d", r.Code)
	}
	r := pull(t, c, b2.Addr(), "g", "Keep", 1, 3, "*", 0)
	got, _ := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true})
	if len(got) != 2 || string(got[0].Body) != "v7" || string(got[1].Body) != "v9" {
		t.Fatalf("messages after restart: %v", got)
	}
}

// TestShutdownAnswersHeldPulls: a pull held for long polling is answered when the broker
// stops, instead of being dropped with the connection.
func TestShutdownAnswersHeldPulls(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Held", 1)
	done := make(chan *remoting.RemotingCommand, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ext := map[string]string{"consumerGroup": "g", "topic": "Held", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
			"sysFlag": strconv.Itoa(wire.PullFlagSubscription | wire.PullFlagSuspend), "commitOffset": "0", "suspendTimeoutMillis": "20000",
			"subscription": "*", "subVersion": "0", "expressionType": "TAG"}
		r, _ := c.InvokeSync(ctx, b.Addr(), remoting.NewRequest(remoting.PullMessage, ext, nil))
		done <- r
	}()
	testkit.WaitFor(t, 5*time.Second, func() bool {
		b.held.mu.Lock()
		defer b.held.mu.Unlock()
		return b.held.n == 1
	}, "the pull to be held")
	start := time.Now()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r == nil || r.ResponseCode() != remoting.PullNotFound || r.ExtFields["nextBeginOffset"] != "0" {
		t.Fatalf("held pull at shutdown: %+v", r)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("shutdown with a held pull took %v", time.Since(start))
	}
}

// TestSystemTopicsCannotBeDeleted: DELETE_TOPIC_IN_BROKER refuses the broker's own topics
// (deleting SCHEDULE_TOPIC_XXXX would lose every pending delayed message).
func TestSystemTopicsCannotBeDeleted(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	for _, topic := range []string{message.ScheduleTopic, message.TransHalfTopic, message.TransOpHalfTopic, message.AutoCreateTopicKey, "DefaultCluster", "broker-a"} {
		r := invoke(t, c, b.Addr(), remoting.NewRequest(remoting.DeleteTopicInBroker, map[string]string{"topic": topic}, nil))
		if r.ResponseCode() != remoting.SystemError || b.topics.get(topic) == nil {
			t.Fatalf("delete %s: code %d, config kept: %v", topic, r.Code, b.topics.get(topic) != nil)
		}
	}
	// A delayed send answers with the producer's queue, not the schedule queue.
	createTopic(t, c, b.Addr(), "One", 1)
	if r := sendV1(t, c, b.Addr(), "One", 0, []byte("x"), map[string]string{"DELAY": "18"}); r.ExtFields["queueId"] != "0" {
		t.Fatalf("delayed send reported queue %s", r.ExtFields["queueId"])
	}
}
