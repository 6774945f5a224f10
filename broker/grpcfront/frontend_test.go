package grpcfront

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/pop"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
)

func startFront(t *testing.T) (*broker.Broker, *Server, v2.MessagingServiceClient, context.Context) {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{})
	s, err := New(Config{Broker: b, Listen: "127.0.0.1:0", Logger: testkit.Quiet(), MinInvisibleDuration: time.Second,
		Pop: pop.Config{ReviveInterval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := metadata.AppendToOutgoingContext(testkit.Context(t, 30*time.Second), clientIDKey, "test-client")
	return b, s, v2.NewMessagingServiceClient(conn), ctx
}

func validMessage(topic string) *v2.Message {
	tag := "A"
	return &v2.Message{Topic: &v2.Resource{Name: topic}, Body: []byte("x"),
		SystemProperties: &v2.SystemProperties{MessageId: "01ABCDEF", MessageType: v2.MessageType_NORMAL, Tag: &tag}}
}

// Malformed sends are refused with the protocol's status code and a message naming
// the field; the front end keeps serving.
func TestSendValidation(t *testing.T) {
	_, _, c, ctx := startFront(t)
	big := strings.Repeat("x", 4<<20+1)
	group := "g"
	long := strings.Repeat("g", 65)
	blank := " "
	cases := []struct {
		name  string
		edit  func(m *v2.Message)
		code  v2.Code
		field string
	}{
		{"no topic", func(m *v2.Message) { m.Topic = nil }, v2.Code_ILLEGAL_TOPIC, "topic"},
		{"bad topic", func(m *v2.Message) { m.Topic.Name = "a b" }, v2.Code_ILLEGAL_TOPIC, "topic"},
		{"DLQ topic", func(m *v2.Message) { m.Topic.Name = "%DLQ%x" }, v2.Code_ILLEGAL_TOPIC, "topic"},
		{"namespace", func(m *v2.Message) { m.Topic.ResourceNamespace = "ns" }, v2.Code_BAD_REQUEST, "resource_namespace"},
		{"empty body", func(m *v2.Message) { m.Body = nil }, v2.Code_MESSAGE_BODY_EMPTY, "body"},
		{"large body", func(m *v2.Message) { m.Body = []byte(big) }, v2.Code_MESSAGE_BODY_TOO_LARGE, "body"},
		{"no system properties", func(m *v2.Message) { m.SystemProperties = nil }, v2.Code_BAD_REQUEST, "system_properties"},
		{"no message id", func(m *v2.Message) { m.SystemProperties.MessageId = "" }, v2.Code_ILLEGAL_MESSAGE_ID, "message_id"},
		{"blank tag", func(m *v2.Message) { m.SystemProperties.Tag = &blank }, v2.Code_ILLEGAL_MESSAGE_TAG, "tag"},
		{"tag with |", func(m *v2.Message) { s := "a|b"; m.SystemProperties.Tag = &s }, v2.Code_ILLEGAL_MESSAGE_TAG, "tag"},
		{"key with space", func(m *v2.Message) { m.SystemProperties.Keys = []string{"a b"} }, v2.Code_ILLEGAL_MESSAGE_KEY, "keys[0]"},
		{"reserved property", func(m *v2.Message) { m.UserProperties = map[string]string{"TAGS": "x"} }, v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "user_properties"},
		{"control char property", func(m *v2.Message) { m.UserProperties = map[string]string{"k": "a\x01b"} }, v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "user_properties"},
		{"FIFO without group", func(m *v2.Message) { m.SystemProperties.MessageType = v2.MessageType_FIFO }, v2.Code_ILLEGAL_MESSAGE_GROUP, "message_group"},
		{"FIFO long group", func(m *v2.Message) {
			m.SystemProperties.MessageType = v2.MessageType_FIFO
			m.SystemProperties.MessageGroup = &long
		}, v2.Code_ILLEGAL_MESSAGE_GROUP, "message_group"},
		{"NORMAL with group", func(m *v2.Message) { m.SystemProperties.MessageGroup = &group }, v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "message_group"},
		{"GZIP", func(m *v2.Message) { m.SystemProperties.BodyEncoding = v2.Encoding_GZIP }, v2.Code_BAD_REQUEST, "body_encoding"},
	}
	for _, tc := range cases {
		m := validMessage("ValidationTopic")
		tc.edit(m)
		resp, err := c.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{m}}, grpc.MaxCallSendMsgSize(8<<20))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		st := resp.GetStatus()
		if st.GetCode() != tc.code || !strings.Contains(st.GetMessage(), tc.field) {
			t.Errorf("%s: status %v %q, want %v naming %q", tc.name, st.GetCode(), st.GetMessage(), tc.code, tc.field)
		}
	}
	if resp, err := c.SendMessage(ctx, &v2.SendMessageRequest{}); err != nil || resp.GetStatus().GetCode() != v2.Code_BAD_REQUEST {
		t.Fatalf("no messages: %v %v", resp.GetStatus(), err)
	}
	// Still serving, and a batch with one bad message stores the good one.
	bad := validMessage("ValidationTopic")
	bad.Body = nil
	resp, err := c.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{validMessage("ValidationTopic"), bad}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus().GetCode() != v2.Code_MULTIPLE_RESULTS || resp.GetEntries()[0].GetStatus().GetCode() != v2.Code_OK ||
		resp.GetEntries()[1].GetStatus().GetCode() != v2.Code_MESSAGE_BODY_EMPTY {
		t.Fatalf("mixed batch: %v", resp)
	}
}

// FIFO messages of one group go to one queue, with the group stored as __SHARDINGKEY.
func TestSendFIFOKeepsAGroupOnOneQueue(t *testing.T) {
	b, _, c, ctx := startFront(t)
	queues := map[string]map[int32]bool{}
	for i := range 40 {
		g := []string{"order-1", "order-2", "order-3"}[i%3]
		m := validMessage("FifoTopic")
		m.SystemProperties.MessageType = v2.MessageType_FIFO
		m.SystemProperties.MessageGroup = &g
		m.SystemProperties.MessageId = "ID" + string(rune('A'+i))
		resp, err := c.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{m}})
		if err != nil || resp.GetStatus().GetCode() != v2.Code_OK {
			t.Fatalf("send: %v %v", resp.GetStatus(), err)
		}
	}
	for q := int32(0); q < 4; q++ {
		msgs, _, err := b.ReadMessages("FifoTopic", q, 0, 64, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			g := m.Property(propertyShardingKey)
			if queues[g] == nil {
				queues[g] = map[int32]bool{}
			}
			queues[g][q] = true
		}
	}
	if len(queues) != 3 {
		t.Fatalf("groups stored: %v", queues)
	}
	for g, qs := range queues {
		if len(qs) != 1 {
			t.Fatalf("group %s spread over queues %v", g, qs)
		}
	}
}

// Receive and ack requests are checked field by field.
func TestReceiveAndAckValidation(t *testing.T) {
	_, _, c, ctx := startFront(t)
	if _, err := c.QueryRoute(ctx, &v2.QueryRouteRequest{Topic: &v2.Resource{Name: "RV"}}); err != nil {
		t.Fatal(err)
	}
	base := func() *v2.ReceiveMessageRequest {
		return &v2.ReceiveMessageRequest{Group: &v2.Resource{Name: "G"}, MessageQueue: &v2.MessageQueue{Topic: &v2.Resource{Name: "RV"}},
			BatchSize: 1, InvisibleDuration: durationpb.New(10 * time.Second), LongPollingTimeout: durationpb.New(0)}
	}
	cases := []struct {
		name  string
		edit  func(r *v2.ReceiveMessageRequest)
		code  v2.Code
		field string
	}{
		{"no group", func(r *v2.ReceiveMessageRequest) { r.Group = nil }, v2.Code_ILLEGAL_CONSUMER_GROUP, "group"},
		{"no queue", func(r *v2.ReceiveMessageRequest) { r.MessageQueue = nil }, v2.Code_BAD_REQUEST, "message_queue"},
		{"batch 0", func(r *v2.ReceiveMessageRequest) { r.BatchSize = 0 }, v2.Code_BAD_REQUEST, "batch_size"},
		{"batch 33", func(r *v2.ReceiveMessageRequest) { r.BatchSize = 33 }, v2.Code_BAD_REQUEST, "batch_size"},
		{"short invisible", func(r *v2.ReceiveMessageRequest) { r.InvisibleDuration = durationpb.New(time.Millisecond) }, v2.Code_ILLEGAL_INVISIBLE_TIME, "invisible_duration"},
		{"no invisible", func(r *v2.ReceiveMessageRequest) { r.InvisibleDuration = nil }, v2.Code_ILLEGAL_INVISIBLE_TIME, "invisible_duration"},
		{"long poll", func(r *v2.ReceiveMessageRequest) { r.LongPollingTimeout = durationpb.New(time.Hour) }, v2.Code_ILLEGAL_POLLING_TIME, "long_polling_timeout"},
		{"bad SQL", func(r *v2.ReceiveMessageRequest) {
			r.FilterExpression = &v2.FilterExpression{Type: v2.FilterType_SQL, Expression: "a >"}
		}, v2.Code_ILLEGAL_FILTER_EXPRESSION, "filter_expression"},
		{"unknown topic", func(r *v2.ReceiveMessageRequest) { r.MessageQueue.Topic.Name = "NoSuchTopic" }, v2.Code_TOPIC_NOT_FOUND, "NoSuchTopic"},
	}
	for _, tc := range cases {
		r := base()
		tc.edit(r)
		st := receiveStatus(t, c, ctx, r)
		if st.GetCode() != tc.code || !strings.Contains(st.GetMessage(), tc.field) {
			t.Errorf("%s: %v %q, want %v naming %q", tc.name, st.GetCode(), st.GetMessage(), tc.code, tc.field)
		}
	}
	if st := receiveStatus(t, c, ctx, base()); st.GetCode() != v2.Code_MESSAGE_NOT_FOUND {
		t.Fatalf("empty topic: %v", st)
	}
	ack, err := c.AckMessage(ctx, &v2.AckMessageRequest{Group: &v2.Resource{Name: "G"}, Topic: &v2.Resource{Name: "RV"},
		Entries: []*v2.AckMessageEntry{{MessageId: "x", ReceiptHandle: "garbage"}}})
	if err != nil || ack.GetStatus().GetCode() != v2.Code_INVALID_RECEIPT_HANDLE || !strings.Contains(ack.GetStatus().GetMessage(), "receipt_handle") {
		t.Fatalf("garbage handle: %v %v", ack.GetStatus(), err)
	}
	ch, err := c.ChangeInvisibleDuration(ctx, &v2.ChangeInvisibleDurationRequest{Group: &v2.Resource{Name: "G"}, Topic: &v2.Resource{Name: "RV"},
		ReceiptHandle: "garbage", InvisibleDuration: durationpb.New(time.Minute)})
	if err != nil || ch.GetStatus().GetCode() != v2.Code_INVALID_RECEIPT_HANDLE {
		t.Fatalf("change with a garbage handle: %v %v", ch.GetStatus(), err)
	}
}

func receiveStatus(t *testing.T, c v2.MessagingServiceClient, ctx context.Context, r *v2.ReceiveMessageRequest) *v2.Status {
	t.Helper()
	stream, err := c.ReceiveMessage(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	var st *v2.Status
	for {
		resp, err := stream.Recv()
		if err != nil {
			break
		}
		if s := resp.GetStatus(); s != nil {
			st = s
		}
	}
	return st
}

// A receive held in long polling is answered when a message arrives.
func TestReceiveLongPollingWakesOnArrival(t *testing.T) {
	_, _, c, ctx := startFront(t)
	if _, err := c.QueryRoute(ctx, &v2.QueryRouteRequest{Topic: &v2.Resource{Name: "LP"}}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		stream, err := c.ReceiveMessage(ctx, &v2.ReceiveMessageRequest{Group: &v2.Resource{Name: "G"},
			MessageQueue: &v2.MessageQueue{Topic: &v2.Resource{Name: "LP"}}, BatchSize: 8,
			InvisibleDuration: durationpb.New(10 * time.Second), LongPollingTimeout: durationpb.New(20 * time.Second)})
		if err != nil {
			done <- result{err: err}
			return
		}
		n := 0
		for {
			resp, err := stream.Recv()
			if err != nil {
				break
			}
			if resp.GetMessage() != nil {
				n++
			}
		}
		done <- result{n: n}
	}()
	// Wait until the receive is held, then send.
	select {
	case r := <-done:
		t.Fatalf("receive returned before a message was sent: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	resp, err := c.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{validMessage("LP")}})
	if err != nil || resp.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("send: %v %v", resp.GetStatus(), err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.n != 1 {
			t.Fatalf("held receive: %+v", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the held receive was not answered within 15 s of the send")
	}
}

// Shutdown ends telemetry streams and held receives, and leaves no goroutine behind.
func TestShutdownEndsStreams(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b, stopBroker := testbroker.Start(t, broker.Config{})
	s, err := New(Config{Broker: b, Listen: "127.0.0.1:0", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := v2.NewMessagingServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), clientIDKey, "c1")
	tel, err := c.Telemetry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ct := v2.ClientType_PRODUCER
	if err := tel.Send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: &v2.Settings{ClientType: &ct,
		PubSub: &v2.Settings_Publishing{Publishing: &v2.Publishing{}}}}}); err != nil {
		t.Fatal(err)
	}
	got, err := tel.Recv()
	if err != nil || got.GetSettings().GetPublishing().GetMaxBodySize() != int32(b.MaxMessageSize()) || got.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("settings: %v %v", got, err)
	}
	if _, err := c.QueryRoute(ctx, &v2.QueryRouteRequest{Topic: &v2.Resource{Name: "SD"}}); err != nil {
		t.Fatal(err)
	}
	held, err := c.ReceiveMessage(ctx, &v2.ReceiveMessageRequest{Group: &v2.Resource{Name: "G"}, MessageQueue: &v2.MessageQueue{Topic: &v2.Resource{Name: "SD"}},
		BatchSize: 1, InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(50 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 9*time.Second {
		t.Fatalf("shutdown took %v: streams were not ended", d)
	}
	for range 10 {
		if _, err := held.Recv(); err != nil {
			break
		}
	}
	if _, err := tel.Recv(); err == nil {
		t.Fatal("telemetry stream still open after shutdown")
	}
	conn.Close()
	stopBroker()
}

// FuzzSendRequest: any SendMessageRequest bytes are decoded and checked without a
// panic; an accepted message has a valid topic, a body within the limit and properties
// a stored record can hold.
func FuzzSendRequest(f *testing.F) {
	seed, _ := proto.Marshal(&v2.SendMessageRequest{Messages: []*v2.Message{validMessage("T")}})
	f.Add(seed)
	g := "grp"
	fifo := validMessage("T")
	fifo.SystemProperties.MessageType = v2.MessageType_FIFO
	fifo.SystemProperties.MessageGroup = &g
	fifo.UserProperties = map[string]string{"a": "b"}
	seed2, _ := proto.Marshal(&v2.SendMessageRequest{Messages: []*v2.Message{fifo}})
	f.Add(seed2)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req v2.SendMessageRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		for i, m := range req.GetMessages() {
			st, err := toStored(i, m, 1024, netip.AddrPort{})
			if err != nil {
				if _, ok := err.(*statusError); !ok {
					t.Fatalf("error %T is not a status", err)
				}
				continue
			}
			if message.ValidateTopic(st.Topic) != nil || len(st.Body) == 0 || len(st.Body) > 1024 {
				t.Fatalf("accepted topic %q body %d bytes", st.Topic, len(st.Body))
			}
			if n := message.EncodedPropertiesLen(st.Properties); n > message.MaxPropertiesLength {
				t.Fatalf("accepted %d bytes of properties", n)
			}
			for k, v := range st.Properties {
				if strings.ContainsAny(k+v, "\x01\x02") {
					t.Fatalf("accepted a property separator in %q=%q", k, v)
				}
			}
		}
	})
}

// FuzzReceiveRequest: any ReceiveMessageRequest bytes are checked without a panic, and
// what passes is within the limits.
func FuzzReceiveRequest(f *testing.F) {
	seed, _ := proto.Marshal(&v2.ReceiveMessageRequest{Group: &v2.Resource{Name: "G"}, MessageQueue: &v2.MessageQueue{Topic: &v2.Resource{Name: "T"}},
		BatchSize: 4, InvisibleDuration: durationpb.New(time.Minute), FilterExpression: &v2.FilterExpression{Type: v2.FilterType_TAG, Expression: "a||b"}})
	f.Add(seed)
	b, _ := testbroker.Start(f, broker.Config{EnablePropertyFilter: true})
	sv := &service{s: &Server{b: b, cfg: Config{MinInvisibleDuration: time.Second}}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req v2.ReceiveMessageRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		r, err := sv.receiveRequest(context.Background(), &req)
		if err != nil {
			if _, ok := err.(*statusError); !ok {
				t.Fatalf("error %T is not a status", err)
			}
			return
		}
		if r.BatchSize < 1 || r.BatchSize > MaxBatchSize || r.Invisible < time.Second || r.Invisible > MaxInvisibleDuration ||
			r.Wait < 0 || r.Wait > MaxLongPollingTimeout || r.Filter == nil {
			t.Fatalf("accepted %+v", r)
		}
	})
}

// With tlsEnable the front end serves TLS with the remoting port's certificate; a
// plain-text client is refused.
func TestTLSAsOnTheRemotingPort(t *testing.T) {
	certFile, keyFile, clientTLS := testkit.SelfSignedTLS(t)
	b, _ := testbroker.Start(t, broker.Config{TLSEnable: true, TLSCertFile: certFile, TLSKeyFile: keyFile})
	s, err := New(Config{Broker: b, Listen: "127.0.0.1:0", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	ctx := metadata.AppendToOutgoingContext(testkit.Context(t, 20*time.Second), clientIDKey, "tls-client")
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := v2.NewMessagingServiceClient(conn).QueryRoute(ctx, &v2.QueryRouteRequest{Topic: &v2.Resource{Name: "TLSTopic"}})
	if err != nil || resp.GetStatus().GetCode() != v2.Code_OK || len(resp.GetMessageQueues()) == 0 {
		t.Fatalf("QueryRoute over TLS: %v %v", resp.GetStatus(), err)
	}
	plain, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := v2.NewMessagingServiceClient(plain).QueryRoute(pctx, &v2.QueryRouteRequest{Topic: &v2.Resource{Name: "TLSTopic"}}); err == nil {
		t.Fatal("a plain-text client was served by the TLS front end")
	}
}

// EndTransaction with a transaction id this broker did not issue for the topic is
// refused; the resolution must be COMMIT or ROLLBACK.
func TestEndTransactionValidation(t *testing.T) {
	_, _, c, ctx := startFront(t)
	m := validMessage("TxnV")
	m.SystemProperties.MessageType = v2.MessageType_TRANSACTION
	resp, err := c.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{m}})
	if err != nil || resp.GetStatus().GetCode() != v2.Code_OK || resp.GetEntries()[0].GetTransactionId() == "" {
		t.Fatalf("transactional send: %v %v", resp, err)
	}
	txid := resp.GetEntries()[0].GetTransactionId()
	for _, tc := range []struct {
		name  string
		req   *v2.EndTransactionRequest
		code  v2.Code
		field string
	}{
		{"garbage id", &v2.EndTransactionRequest{Topic: &v2.Resource{Name: "TxnV"}, TransactionId: "garbage", Resolution: v2.TransactionResolution_COMMIT}, v2.Code_INVALID_TRANSACTION_ID, "transaction_id"},
		{"other topic", &v2.EndTransactionRequest{Topic: &v2.Resource{Name: "TxnOther"}, TransactionId: txid, Resolution: v2.TransactionResolution_COMMIT}, v2.Code_INVALID_TRANSACTION_ID, "transaction_id"},
		{"no resolution", &v2.EndTransactionRequest{Topic: &v2.Resource{Name: "TxnV"}, TransactionId: txid}, v2.Code_BAD_REQUEST, "resolution"},
	} {
		r, err := c.EndTransaction(ctx, tc.req)
		if err != nil || r.GetStatus().GetCode() != tc.code || !strings.Contains(r.GetStatus().GetMessage(), tc.field) {
			t.Errorf("%s: %v %v, want %v naming %s", tc.name, r.GetStatus(), err, tc.code, tc.field)
		}
	}
	if r, err := c.EndTransaction(ctx, &v2.EndTransactionRequest{Topic: &v2.Resource{Name: "TxnV"}, TransactionId: txid,
		Resolution: v2.TransactionResolution_ROLLBACK}); err != nil || r.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("rollback: %v %v", r.GetStatus(), err)
	}
	// Committing after the rollback is refused (the transaction already ended).
	if r, err := c.EndTransaction(ctx, &v2.EndTransactionRequest{Topic: &v2.Resource{Name: "TxnV"}, TransactionId: txid,
		Resolution: v2.TransactionResolution_COMMIT}); err != nil || r.GetStatus().GetCode() != v2.Code_PRECONDITION_FAILED {
		t.Fatalf("commit after rollback: %v %v, want PRECONDITION_FAILED", r.GetStatus(), err)
	}
}

// A settings answer equal to the previous one on the stream is not sent again (the
// official Go client applies each answer racing its own sends); a changed one is.
func TestTelemetryRepeatedSettingsAnsweredOnce(t *testing.T) {
	_, _, c, ctx := startFront(t)
	st, err := c.Telemetry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	producer := v2.ClientType_PRODUCER
	settings := func(topics ...string) *v2.TelemetryCommand {
		var rs []*v2.Resource
		for _, tp := range topics {
			rs = append(rs, &v2.Resource{Name: tp})
		}
		return &v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: &v2.Settings{ClientType: &producer,
			PubSub: &v2.Settings_Publishing{Publishing: &v2.Publishing{Topics: rs}}}}}
	}
	for _, cmd := range []*v2.TelemetryCommand{settings("A"), settings("A"), settings("A", "B")} {
		if err := st.Send(cmd); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []int{1, 2} { // topics echoed: A's answer, then A+B's; the repeat has none
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(r.GetSettings().GetPublishing().GetTopics()); r.GetStatus().GetCode() != v2.Code_OK || n != want {
			t.Fatalf("answer %d: %v with %d topics, want %d", i, r.GetStatus(), n, want)
		}
	}
	_ = st.CloseSend()
}
