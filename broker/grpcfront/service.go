package grpcfront

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/pop"
	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
)

// service implements v2.MessagingServiceServer. Every answer carries a Status (the
// gRPC call itself succeeds), as Apache RocketMQ's proxy answers; the RPCs not served
// yet answer NOT_IMPLEMENTED.
type service struct {
	v2.UnimplementedMessagingServiceServer
	s *Server
}

const clientIDKey = "x-mq-client-id"

func clientID(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(clientIDKey); len(v) > 0 {
		return v[0]
	}
	return ""
}

func peerAddr(ctx context.Context) netip.AddrPort {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
			return ap
		}
	}
	return netip.AddrPort{}
}

// route is the message queues of a topic, all naming this front end's endpoint.
func (sv *service) route(tc wire.TopicConfig) []*v2.MessageQueue {
	n := max(tc.ReadQueueNums, tc.WriteQueueNums)
	out := make([]*v2.MessageQueue, 0, n)
	br := &v2.Broker{Name: sv.s.b.Name(), Id: 0, Endpoints: sv.s.ep}
	for i := range n {
		read := i < tc.ReadQueueNums && tc.Perm&wire.PermRead != 0
		write := i < tc.WriteQueueNums && tc.Perm&wire.PermWrite != 0
		perm := v2.Permission_NONE
		switch {
		case read && write:
			perm = v2.Permission_READ_WRITE
		case read:
			perm = v2.Permission_READ
		case write:
			perm = v2.Permission_WRITE
		}
		out = append(out, &v2.MessageQueue{Topic: &v2.Resource{Name: tc.TopicName}, Id: int32(i), Permission: perm, Broker: br,
			// Sluice topics carry no message type: every type is accepted.
			AcceptMessageTypes: []v2.MessageType{v2.MessageType_NORMAL, v2.MessageType_FIFO, v2.MessageType_DELAY, v2.MessageType_TRANSACTION}})
	}
	return out
}

func (sv *service) QueryRoute(ctx context.Context, req *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error) {
	c, err := sv.caller(ctx)
	var topic string
	if err == nil {
		topic, err = checkTopic("topic", req.GetTopic())
	}
	if err == nil {
		err = allow(c, acl.Topic(topic, acl.Any))
	}
	if err != nil {
		return &v2.QueryRouteResponse{Status: statusOf(err)}, nil
	}
	// Auto-creation is a publisher's: a caller with only SUB on the topic does not create it.
	tc, err := sv.s.b.TopicConfig(topic, c == nil || c.Allows(acl.Topic(topic, acl.Pub)))
	if err != nil {
		return &v2.QueryRouteResponse{Status: statusOf(err)}, nil
	}
	return &v2.QueryRouteResponse{Status: okStatus(), MessageQueues: sv.route(tc)}, nil
}

func (sv *service) Heartbeat(ctx context.Context, req *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
	err := sv.member(ctx, req.Group)
	if err == nil && clientID(ctx) != "" {
		sv.registerHeartbeat(ctx, req)
	}
	return &v2.HeartbeatResponse{Status: statusOf(err)}, nil
}

func (sv *service) NotifyClientTermination(ctx context.Context, req *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
	group := req.GetGroup()
	if group.GetName() == "" {
		group = nil // a producer's termination names no group
	}
	err := sv.member(ctx, group)
	if id := clientID(ctx); err == nil && id != "" {
		// One client id is one client object of the official clients: all its
		// registrations end.
		sv.s.b.FrontClientGone(broker.ProtocolGRPC, id, "")
	}
	return &v2.NotifyClientTerminationResponse{Status: statusOf(err)}, nil
}

// Telemetry answers every Settings the client sends with the settings the broker
// imposes (the clients block at start until they get them).
func (sv *service) Telemetry(stream grpc.BidiStreamingServer[v2.TelemetryCommand, v2.TelemetryCommand]) error {
	if clientID(stream.Context()) == "" {
		return stream.Send(&v2.TelemetryCommand{Status: &v2.Status{Code: v2.Code_CLIENT_ID_REQUIRED, Message: "metadata x-mq-client-id: required"}})
	}
	caller, err := sv.caller(stream.Context())
	if err != nil {
		return stream.Send(&v2.TelemetryCommand{Status: statusOf(err)})
	}
	type recv struct {
		cmd *v2.TelemetryCommand
		err error
	}
	tc := &telemetryConn{stream: stream, caller: caller}
	defer sv.s.producers.remove(tc)
	var last *v2.TelemetryCommand // the last settings answer sent
	in := make(chan recv, 1)
	go func() { // ends when the stream ends: the handler's return cancels it
		for {
			cmd, err := stream.Recv()
			select {
			case in <- recv{cmd, err}:
			case <-stream.Context().Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-sv.s.ctx.Done():
			return nil
		case r := <-in:
			if errors.Is(r.err, io.EOF) {
				return nil
			}
			if r.err != nil {
				return r.err
			}
			if st := r.cmd.GetSettings(); st != nil {
				cmd := sv.settings(st)
				if err := settingsAllowed(caller, st); err != nil {
					// Refused settings are answered FORBIDDEN, with the broker's settings
					// still (the clients block at start until they get some; each of their
					// calls is then refused on its own); a producer refused is not
					// registered for transaction checks.
					sv.s.producers.remove(tc)
					cmd.Status = statusOf(err)
				} else {
					sv.registerSettings(stream.Context(), st)
					if st.GetClientType() == v2.ClientType_PRODUCER {
						var topics []string
						for _, t := range st.GetPublishing().GetTopics() {
							topics = append(topics, t.GetName())
						}
						sv.s.producers.add(tc, topics)
					}
				}
				// An answer equal to the last one on this stream is not sent again: the
				// official Go client v5.1.4 applies every settings answer without a lock
				// while its sends read those settings (a data race in the client), and it
				// repeats its settings after start; an unchanged answer would tell it
				// nothing.
				if last != nil && proto.Equal(last, cmd) {
					continue
				}
				if err := tc.send(cmd); err != nil {
					return err
				}
				last = cmd
			}
			// thread stack traces and verify results are not asked for: nothing to do
		}
	}
}

// settings is the broker's answer to a client's settings.
func (sv *service) settings(c *v2.Settings) *v2.TelemetryCommand {
	out := &v2.Settings{
		ClientType:     c.ClientType,
		AccessPoint:    c.AccessPoint,
		RequestTimeout: c.RequestTimeout,
		UserAgent:      c.UserAgent,
		// No metric settings: the broker collects no client metrics, and an absent metric
		// is "off" to the clients. The official Go client v5.1.4 replaces its meter
		// without a lock on every settings answer that carries one, racing a send in
		// flight (a -race run of TestDifferentialRocketMQ5 failed on it).
	}
	st := okStatus()
	switch c.GetClientType() {
	case v2.ClientType_PRODUCER:
		// Go clients get no backoff policy and keep their own (WithMaxAttempts): the
		// official Go client v5.1.4 copies it into the settings proto it may be marshalling
		// for another stream at that moment (a data race in the client that failed a -race
		// run of TestCrossV5SendRemotingConsume). The Java client needs one to start.
		if c.GetUserAgent().GetLanguage() != v2.Language_GOLANG {
			out.BackoffPolicy = &v2.RetryPolicy{MaxAttempts: 3, Strategy: &v2.RetryPolicy_ExponentialBackoff{
				ExponentialBackoff: &v2.ExponentialBackoff{Initial: durationpb.New(10 * time.Millisecond), Max: durationpb.New(time.Second), Multiplier: 2}}}
		}
		out.PubSub = &v2.Settings_Publishing{Publishing: &v2.Publishing{Topics: c.GetPublishing().GetTopics(),
			MaxBodySize: int32(min(sv.s.b.MaxMessageSize(), 1<<30)), ValidateMessageType: true}}
	case v2.ClientType_SIMPLE_CONSUMER, v2.ClientType_PUSH_CONSUMER:
		sub := c.GetSubscription()
		attempts := int32(17)
		if g := sub.GetGroup(); g != nil {
			attempts = backend{sv.s.b}.MaxDeliveryAttempts(g.GetName())
		}
		out.BackoffPolicy = &v2.RetryPolicy{MaxAttempts: attempts, Strategy: &v2.RetryPolicy_ExponentialBackoff{
			ExponentialBackoff: &v2.ExponentialBackoff{Initial: durationpb.New(time.Second), Max: durationpb.New(2 * time.Hour), Multiplier: 2}}}
		fifo := false
		batch := int32(MaxBatchSize)
		out.PubSub = &v2.Settings_Subscription{Subscription: &v2.Subscription{Group: sub.GetGroup(),
			Subscriptions: sub.GetSubscriptions(), Fifo: &fifo, ReceiveBatchSize: &batch,
			LongPollingTimeout: durationpb.New(sv.s.cfg.LongPollingTimeout)}}
	default:
		st = &v2.Status{Code: v2.Code_UNRECOGNIZED_CLIENT_TYPE, Message: "settings.client_type " + c.GetClientType().String() + ": not served"}
	}
	return &v2.TelemetryCommand{Status: st, Command: &v2.TelemetryCommand_Settings{Settings: out}}
}

func (sv *service) SendMessage(ctx context.Context, req *v2.SendMessageRequest) (*v2.SendMessageResponse, error) {
	c, err := sv.caller(ctx)
	if err != nil {
		return &v2.SendMessageResponse{Status: statusOf(err)}, nil
	}
	msgs := req.GetMessages()
	if len(msgs) == 0 || len(msgs) > MaxSendBatch {
		return &v2.SendMessageResponse{Status: &v2.Status{Code: v2.Code_BAD_REQUEST, Message: "messages: 1 to 1024 messages required"}}, nil
	}
	born := peerAddr(ctx)
	entries := make([]*v2.SendResultEntry, len(msgs))
	failed := 0
	var first *v2.Status
	for i, pm := range msgs {
		m, err := toStored(i, pm, sv.s.b.MaxMessageSize(), born)
		if err == nil {
			err = allow(c, acl.Topic(m.Topic, acl.Pub))
		}
		if err == nil {
			if g := m.Property(propertyShardingKey); g != "" {
				m.QueueID, err = sv.fifoQueue(m.Topic, g)
			}
		}
		var res store.PutResult
		if err == nil {
			res, err = sv.s.b.PutMessage(ctx, m)
			if err == nil && res.Status == store.PutFlushDiskTimeout {
				err = refuse(v2.Code_MASTER_PERSISTENCE_TIMEOUT, "the message was written but not flushed to disk in time (SYNC_FLUSH)")
			}
		}
		e := &v2.SendResultEntry{Status: statusOf(err)}
		if err == nil {
			e.MessageId = pm.GetSystemProperties().GetMessageId()
			e.Offset = res.QueueOffset
			if m.Topic == message.TransHalfTopic { // a half message: EndTransaction names it by this id
				e.TransactionId = sv.s.pop.TransactionID(m.Property(message.PropertyRealTopic), res.CommitLogOffset, res.QueueOffset)
			} else {
				// As Apache RocketMQ 5.3 answers any other send: the message id
				// (TestDifferentialRocketMQ5/SendReceiveAck). EndTransaction refuses it.
				e.TransactionId = e.MessageId
			}
			if m.Topic == broker.TimerTopic { // parked until due: it can be recalled
				at, _ := strconv.ParseInt(m.Property(broker.PropertyTimerOutMS), 10, 64)
				e.RecallHandle = sv.s.pop.RecallHandle(m.Property(message.PropertyRealTopic), res.CommitLogOffset, at)
			}
		} else {
			failed++
			if first == nil {
				first = e.Status
			}
		}
		entries[i] = e
	}
	st := okStatus()
	switch {
	case failed == len(msgs):
		st = first
	case failed > 0:
		st = &v2.Status{Code: v2.Code_MULTIPLE_RESULTS, Message: "some messages were not stored: see the entries"}
	}
	return &v2.SendMessageResponse{Status: st, Entries: entries}, nil
}

// fifoQueue is the queue of a message group: the same group always goes to the same
// writable queue (Java String.hashCode of the group, as Apache RocketMQ's proxy).
func (sv *service) fifoQueue(topic, group string) (int32, error) {
	tc, err := sv.s.b.TopicConfig(topic, true)
	if err != nil {
		return 0, err
	}
	if tc.WriteQueueNums <= 0 {
		return 0, refuse(v2.Code_FORBIDDEN, "topic %s has no writable queue", topic)
	}
	var h int32
	for _, c := range []byte(group) {
		h = 31*h + int32(c)
	}
	if h < 0 {
		h = -h
		if h < 0 {
			h = 0
		}
	}
	return h % int32(tc.WriteQueueNums), nil
}

func (sv *service) QueryAssignment(ctx context.Context, req *v2.QueryAssignmentRequest) (*v2.QueryAssignmentResponse, error) {
	_, topic, err := sv.consumer(ctx, req.GetGroup(), "topic", req.GetTopic())
	if err != nil {
		return &v2.QueryAssignmentResponse{Status: statusOf(err)}, nil
	}
	tc, err := sv.s.b.TopicConfig(topic, false)
	if err != nil {
		return &v2.QueryAssignmentResponse{Status: statusOf(err)}, nil
	}
	// POP: every consumer of the group receives from every queue of the broker, so one
	// assignment names the broker.
	qs := sv.route(tc)
	if len(qs) == 0 {
		return &v2.QueryAssignmentResponse{Status: okStatus()}, nil
	}
	return &v2.QueryAssignmentResponse{Status: okStatus(), Assignments: []*v2.Assignment{{MessageQueue: qs[0]}}}, nil
}

// receiveRequest authenticates and checks a ReceiveMessage request.
func (sv *service) receiveRequest(ctx context.Context, req *v2.ReceiveMessageRequest) (pop.ReceiveRequest, error) {
	var r pop.ReceiveRequest
	var err error
	if req.GetMessageQueue() == nil {
		return r, refuse(v2.Code_BAD_REQUEST, "message_queue: required")
	}
	if r.Group, r.Topic, err = sv.consumer(ctx, req.GetGroup(), "message_queue.topic", req.GetMessageQueue().GetTopic()); err != nil {
		return r, err
	}
	if bs := req.GetBatchSize(); bs < 1 || bs > MaxBatchSize {
		return r, refuse(v2.Code_BAD_REQUEST, "batch_size %d: must be 1 to %d", bs, MaxBatchSize)
	}
	r.BatchSize = int(req.GetBatchSize())
	switch {
	case req.InvisibleDuration == nil && req.GetAutoRenew():
		// A push consumer: the reference renews the invisibility while the client holds
		// the message; Sluice gives a fixed one (docs/rocketmq5.md).
		r.Invisible = AutoRenewInvisibleDuration
	case req.InvisibleDuration == nil:
		return r, refuse(v2.Code_ILLEGAL_INVISIBLE_TIME, "invisible_duration: required unless auto_renew")
	default:
		if r.Invisible, err = sv.invisible("invisible_duration", req.GetInvisibleDuration()); err != nil {
			return r, err
		}
	}
	if lp := req.GetLongPollingTimeout(); lp != nil {
		if !lp.IsValid() || lp.AsDuration() < 0 || lp.AsDuration() > MaxLongPollingTimeout {
			return r, refuse(v2.Code_ILLEGAL_POLLING_TIME, "long_polling_timeout: must be 0 to %v", MaxLongPollingTimeout)
		}
		r.Wait = lp.AsDuration()
	}
	fe := req.GetFilterExpression()
	typ := "TAG"
	expr := "*"
	if fe != nil {
		switch fe.GetType() {
		case v2.FilterType_TAG, v2.FilterType_FILTER_TYPE_UNSPECIFIED:
		case v2.FilterType_SQL:
			typ = "SQL92"
		default:
			return r, refuse(v2.Code_ILLEGAL_FILTER_EXPRESSION, "filter_expression.type %v: TAG or SQL", fe.GetType())
		}
		if fe.GetExpression() != "" {
			expr = fe.GetExpression()
		}
	}
	if len(expr) > 4096 {
		return r, refuse(v2.Code_ILLEGAL_FILTER_EXPRESSION, "filter_expression.expression: %d bytes, more than 4096", len(expr))
	}
	f, ferr := sv.s.b.SubscriptionFilter(expr, typ)
	if ferr != nil {
		return r, refuse(v2.Code_ILLEGAL_FILTER_EXPRESSION, "filter_expression: %v", ferr)
	}
	r.Filter = f
	return r, nil
}

func (sv *service) invisible(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil || !d.IsValid() {
		return 0, refuse(v2.Code_ILLEGAL_INVISIBLE_TIME, "%s: required", field)
	}
	v := d.AsDuration()
	if v < sv.s.cfg.MinInvisibleDuration || v > MaxInvisibleDuration {
		return 0, refuse(v2.Code_ILLEGAL_INVISIBLE_TIME, "%s %v: must be %v to %v", field, v, sv.s.cfg.MinInvisibleDuration, MaxInvisibleDuration)
	}
	return v, nil
}

func (sv *service) ReceiveMessage(req *v2.ReceiveMessageRequest, stream grpc.ServerStreamingServer[v2.ReceiveMessageResponse]) error {
	status := func(st *v2.Status) error {
		return stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Status{Status: st}})
	}
	r, err := sv.receiveRequest(stream.Context(), req)
	if err != nil {
		return status(statusOf(err))
	}
	if _, err := sv.s.b.GroupConfig(r.Group); err != nil {
		return status(statusOf(err))
	}
	tc, err := sv.s.b.TopicConfig(r.Topic, false)
	if err != nil {
		return status(statusOf(err))
	}
	if tc.Perm&wire.PermRead == 0 {
		return status(&v2.Status{Code: v2.Code_FORBIDDEN, Message: "topic " + r.Topic + " is not readable"})
	}
	for q := range tc.ReadQueueNums {
		r.QueueIDs = append(r.QueueIDs, int32(q))
	}
	// The group's retry topic: messages of this topic its 4.x consumers sent back.
	if rc, err := sv.s.b.TopicConfig(message.RetryTopic(r.Group), false); err == nil && rc.Perm&wire.PermRead != 0 {
		for q := range rc.ReadQueueNums {
			r.RetryQueueIDs = append(r.RetryQueueIDs, int32(q))
		}
	}
	ctx := stream.Context()
	// Answer before the client's deadline: leave it a second.
	if dl, ok := ctx.Deadline(); ok {
		r.Wait = min(r.Wait, max(time.Until(dl)-time.Second, 0))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(sv.s.ctx, cancel)
	defer stop()
	out, err := sv.s.pop.Receive(ctx, r)
	if err != nil {
		switch {
		case errors.Is(err, pop.ErrTooManyInflight):
			return status(&v2.Status{Code: v2.Code_TOO_MANY_REQUESTS, Message: err.Error()})
		case ctx.Err() != nil:
			return status(&v2.Status{Code: v2.Code_MESSAGE_NOT_FOUND, Message: "no new message"})
		}
		return status(statusOf(err))
	}
	if len(out) == 0 {
		return status(&v2.Status{Code: v2.Code_MESSAGE_NOT_FOUND, Message: "no new message"})
	}
	if err := status(okStatus()); err != nil {
		return err
	}
	for _, d := range out {
		m := toV5(d.Message, d.Handle, d.Attempt, r.Invisible)
		if err := stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Message{Message: m}}); err != nil {
			return err // the deliveries come back when their invisibility ends
		}
	}
	return stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: timestamppb.Now()}})
}

// handleStatus maps a POP error to a status.
func handleStatus(err error) *v2.Status {
	var he *pop.HandleError
	if errors.As(err, &he) {
		return &v2.Status{Code: v2.Code_INVALID_RECEIPT_HANDLE, Message: he.Error()}
	}
	return statusOf(err)
}

func (sv *service) AckMessage(ctx context.Context, req *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
	group, topic, err := sv.consumer(ctx, req.GetGroup(), "topic", req.GetTopic())
	if err == nil && (len(req.GetEntries()) == 0 || len(req.GetEntries()) > MaxAckEntries) {
		err = refuse(v2.Code_BAD_REQUEST, "entries: 1 to %d entries required", MaxAckEntries)
	}
	if err != nil {
		return &v2.AckMessageResponse{Status: statusOf(err)}, nil
	}
	out := make([]*v2.AckMessageResultEntry, len(req.GetEntries()))
	failed := 0
	var first *v2.Status
	for i, e := range req.GetEntries() {
		var st *v2.Status
		switch {
		case e == nil || e.GetReceiptHandle() == "":
			st = &v2.Status{Code: v2.Code_INVALID_RECEIPT_HANDLE, Message: "entries[].receipt_handle: required"}
		default:
			st = handleStatus(sv.s.pop.Ack(group, topic, e.GetReceiptHandle()))
		}
		if st.Code != v2.Code_OK {
			failed++
			if first == nil {
				first = st
			}
		}
		out[i] = &v2.AckMessageResultEntry{MessageId: e.GetMessageId(), ReceiptHandle: e.GetReceiptHandle(), Status: st}
	}
	st := okStatus()
	switch {
	case failed == len(out):
		st = first
	case failed > 0:
		st = &v2.Status{Code: v2.Code_MULTIPLE_RESULTS, Message: "some entries were not acknowledged: see the entries"}
	}
	return &v2.AckMessageResponse{Status: st, Entries: out}, nil
}

func (sv *service) ChangeInvisibleDuration(ctx context.Context, req *v2.ChangeInvisibleDurationRequest) (*v2.ChangeInvisibleDurationResponse, error) {
	group, topic, err := sv.consumer(ctx, req.GetGroup(), "topic", req.GetTopic())
	var d time.Duration
	if err == nil && req.GetReceiptHandle() == "" {
		err = refuse(v2.Code_INVALID_RECEIPT_HANDLE, "receipt_handle: required")
	}
	if err == nil {
		// A change may be short (a push consumer's retry backoff starts at 1 s); only a
		// receive is held to MinInvisibleDuration, as on the reference.
		switch dd := req.GetInvisibleDuration(); {
		case dd == nil || !dd.IsValid() || dd.AsDuration() < 0 || dd.AsDuration() > MaxInvisibleDuration:
			err = refuse(v2.Code_ILLEGAL_INVISIBLE_TIME, "invisible_duration: required, 0 to %v", MaxInvisibleDuration)
		default:
			d = dd.AsDuration()
		}
	}
	if err != nil {
		return &v2.ChangeInvisibleDurationResponse{Status: statusOf(err)}, nil
	}
	h, _, err := sv.s.pop.ChangeInvisible(group, topic, req.GetReceiptHandle(), d)
	if err != nil {
		return &v2.ChangeInvisibleDurationResponse{Status: handleStatus(err)}, nil
	}
	return &v2.ChangeInvisibleDurationResponse{Status: okStatus(), ReceiptHandle: h}, nil
}

func (sv *service) ForwardMessageToDeadLetterQueue(ctx context.Context, req *v2.ForwardMessageToDeadLetterQueueRequest) (*v2.ForwardMessageToDeadLetterQueueResponse, error) {
	group, topic, err := sv.consumer(ctx, req.GetGroup(), "topic", req.GetTopic())
	if err == nil && req.GetReceiptHandle() == "" {
		err = refuse(v2.Code_INVALID_RECEIPT_HANDLE, "receipt_handle: required")
	}
	if err != nil {
		return &v2.ForwardMessageToDeadLetterQueueResponse{Status: statusOf(err)}, nil
	}
	if err := sv.s.pop.DeadLetterNow(ctx, group, topic, req.GetReceiptHandle()); err != nil {
		return &v2.ForwardMessageToDeadLetterQueueResponse{Status: handleStatus(err)}, nil
	}
	return &v2.ForwardMessageToDeadLetterQueueResponse{Status: okStatus()}, nil
}

// EndTransaction commits or rolls back a half message named by its transaction id.
func (sv *service) EndTransaction(ctx context.Context, req *v2.EndTransactionRequest) (*v2.EndTransactionResponse, error) {
	topic, err := sv.publisher(ctx, req.GetTopic())
	if err == nil && req.GetTransactionId() == "" {
		err = refuse(v2.Code_INVALID_TRANSACTION_ID, "transaction_id: required")
	}
	var commit bool
	if err == nil {
		switch req.GetResolution() {
		case v2.TransactionResolution_COMMIT:
			commit = true
		case v2.TransactionResolution_ROLLBACK:
		default:
			err = refuse(v2.Code_BAD_REQUEST, "resolution %v: COMMIT or ROLLBACK", req.GetResolution())
		}
	}
	if err != nil {
		return &v2.EndTransactionResponse{Status: statusOf(err)}, nil
	}
	off, queueOff, err := sv.s.pop.ParseTransactionID(topic, req.GetTransactionId())
	if err != nil {
		return &v2.EndTransactionResponse{Status: &v2.Status{Code: v2.Code_INVALID_TRANSACTION_ID, Message: err.Error()}}, nil
	}
	fromCheck := req.GetSource() == v2.TransactionSource_SOURCE_SERVER_CHECK
	if err := sv.s.b.EndTransaction(ctx, TransactionProducerGroup, queueOff, off, commit, fromCheck); err != nil {
		return &v2.EndTransactionResponse{Status: statusOf(err)}, nil
	}
	return &v2.EndTransactionResponse{Status: okStatus()}, nil
}

// RecallMessage cancels a timer message that is not yet due, named by the recall
// handle its send was answered with.
func (sv *service) RecallMessage(ctx context.Context, req *v2.RecallMessageRequest) (*v2.RecallMessageResponse, error) {
	topic, err := sv.publisher(ctx, req.GetTopic())
	if err == nil && req.GetRecallHandle() == "" {
		err = refuse(v2.Code_BAD_REQUEST, "recall_handle: required")
	}
	if err != nil {
		return &v2.RecallMessageResponse{Status: statusOf(err)}, nil
	}
	off, at, err := sv.s.pop.ParseRecallHandle(topic, req.GetRecallHandle())
	if err != nil {
		return &v2.RecallMessageResponse{Status: &v2.Status{Code: v2.Code_BAD_REQUEST, Message: err.Error()}}, nil
	}
	id, err := sv.s.b.RecallTimer(off, at)
	if errors.Is(err, broker.ErrTimerNotPending) {
		return &v2.RecallMessageResponse{Status: &v2.Status{Code: v2.Code_NOT_FOUND, Message: "recall_handle: " + err.Error()}}, nil
	}
	if err != nil {
		return &v2.RecallMessageResponse{Status: statusOf(err)}, nil
	}
	return &v2.RecallMessageResponse{Status: okStatus(), MessageId: id}, nil
}

// telemetryConn is one client's telemetry stream; sends are serialised (the handler
// answers settings, the transaction checker sends recovery commands).
type telemetryConn struct {
	mu     sync.Mutex
	stream grpc.BidiStreamingServer[v2.TelemetryCommand, v2.TelemetryCommand]
	caller *acl.GRPCCaller // nil without ACL
}

func (c *telemetryConn) send(cmd *v2.TelemetryCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stream.Send(cmd)
}

// producerSet is the producers connected by telemetry, with the topics they publish.
type producerSet struct {
	mu    sync.Mutex
	conns map[*telemetryConn][]string
}

func (p *producerSet) add(c *telemetryConn, topics []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = map[*telemetryConn][]string{}
	}
	p.conns[c] = topics
}

func (p *producerSet) remove(c *telemetryConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// forTopic returns a producer publishing topic (one that named no topics will do too),
// with PUB on the topic under ACL: a transaction check shows it the half message.
func (p *producerSet) forTopic(topic string) *telemetryConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var any *telemetryConn
	for c, topics := range p.conns {
		if allow(c.caller, acl.Topic(topic, acl.Pub)) != nil {
			continue
		}
		if slices.Contains(topics, topic) {
			return c
		}
		if len(topics) == 0 {
			any = c
		}
	}
	return any
}

// checkTransaction is the broker's transaction checker for v5 half messages: it sends
// RecoverOrphanedTransactionCommand to a producer publishing the message's topic, which
// answers with EndTransaction (source SERVER_CHECK).
func (s *Server) checkTransaction(_ context.Context, half *message.MessageExt) bool {
	if half.Property(message.PropertyProducerGroup) != TransactionProducerGroup {
		return false
	}
	topic := half.Property(message.PropertyRealTopic)
	c := s.producers.forTopic(topic)
	if c == nil {
		return false
	}
	view := *half
	view.Topic = topic
	if qid, err := strconv.Atoi(half.Property(message.PropertyRealQueueID)); err == nil {
		view.QueueID = int32(qid)
	}
	m := toV5(&view, "", 0, 0)
	m.SystemProperties.ReceiptHandle, m.SystemProperties.DeliveryAttempt, m.SystemProperties.InvisibleDuration = nil, nil, nil
	err := c.send(&v2.TelemetryCommand{Status: okStatus(), Command: &v2.TelemetryCommand_RecoverOrphanedTransactionCommand{
		RecoverOrphanedTransactionCommand: &v2.RecoverOrphanedTransactionCommand{Message: m,
			TransactionId: s.pop.TransactionID(topic, half.CommitLogOffset, half.QueueOffset)}}})
	if err != nil {
		s.log.Warn("send a transaction check to a v5 producer", "topic", topic, "err", err)
		return false
	}
	return true
}
