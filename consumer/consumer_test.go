package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runSigtermChild()) // a consumer process for TestSIGTERMMidBatch
	}
	goleak.VerifyTestMain(m)
}

func ok(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
	return message.ConsumeSuccess, nil
}

func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func TestConfigValidate(t *testing.T) {
	ns := []string{"127.0.0.1:9876"}
	for name, c := range map[string]struct {
		cfg   Config
		field string
	}{
		"no namesrv":     {Config{Group: "g"}, "NamesrvAddrs"},
		"bad namesrv":    {Config{NamesrvAddrs: []string{"nohostport"}, Group: "g"}, "NamesrvAddrs[0]"},
		"no group":       {Config{NamesrvAddrs: ns}, "Group"},
		"bad group":      {Config{NamesrvAddrs: ns, Group: "a b"}, "Group"},
		"long group":     {Config{NamesrvAddrs: ns, Group: strings.Repeat("g", 125)}, "Group"},
		"model":          {Config{NamesrvAddrs: ns, Group: "g", MessageModel: 5}, "MessageModel"},
		"from where":     {Config{NamesrvAddrs: ns, Group: "g", ConsumeFromWhere: 7}, "ConsumeFromWhere"},
		"goroutines":     {Config{NamesrvAddrs: ns, Group: "g", ConsumeGoroutines: -1}, "ConsumeGoroutines"},
		"pull batch":     {Config{NamesrvAddrs: ns, Group: "g", PullBatchSize: 5000}, "PullBatchSize"},
		"consume batch":  {Config{NamesrvAddrs: ns, Group: "g", ConsumeMessageBatchMaxSize: 33}, "ConsumeMessageBatchMaxSize"},
		"reconsume":      {Config{NamesrvAddrs: ns, Group: "g", MaxReconsumeTimes: Retries(-2)}, "MaxReconsumeTimes"},
		"suspend":        {Config{NamesrvAddrs: ns, Group: "g", SuspendCurrentQueueTime: -time.Second}, "SuspendCurrentQueueTime"},
		"negative timer": {Config{NamesrvAddrs: ns, Group: "g", RebalanceInterval: -time.Second}, "RebalanceInterval"},
	} {
		t.Run(name, func(t *testing.T) {
			var ce *config.Error
			if _, err := NewPushConsumer(c.cfg); !errors.As(err, &ce) || ce.Package != "consumer" || ce.Field != c.field ||
				!strings.Contains(err.Error(), c.field) {
				t.Fatalf("want a *config.Error naming %s, got %v", c.field, err)
			}
		})
	}
}

// A group one byte over message.MaxGroupLength is refused by both consumers with an error
// naming the group's own length and limit (121 and 120 bytes), not the derived retry
// topic's (128 and 127), which the user never typed.
func TestGroupLengthErrorNamesGroupLimit(t *testing.T) {
	ns := []string{"127.0.0.1:9876"}
	long := strings.Repeat("g", message.MaxGroupLength+1)
	_, pushErr := NewPushConsumer(Config{NamesrvAddrs: ns, Group: long})
	_, pullErr := NewPullConsumer(PullConfig{NamesrvAddrs: ns, Group: long})
	for name, err := range map[string]error{"push": pushErr, "pull": pullErr} {
		var ve *message.ValidationError
		if !errors.As(err, &ve) || ve.Field != "group" || ve.Limit != message.MaxGroupLength || ve.Value != len(long) ||
			!strings.Contains(err.Error(), "Group") {
			t.Errorf("%s consumer with a %d-byte group: %v, want a *message.ValidationError for the group, limit %d", name, len(long), err, message.MaxGroupLength)
		}
	}
	if _, err := NewPullConsumer(PullConfig{NamesrvAddrs: ns, Group: long[1:]}); err != nil {
		t.Fatalf("pull consumer with a %d-byte group: %v", len(long)-1, err)
	}
}

func TestSubscribeAndHeartbeatShape(t *testing.T) {
	c, err := NewPushConsumer(Config{NamesrvAddrs: []string{deadAddr(t)}, Group: "cg", Logger: quiet, ConsumeFromWhere: ConsumeFromFirstOffset})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown(context.Background())
	if err := c.Start(context.Background()); !errors.Is(err, ErrNoSubscription) {
		t.Fatalf("Start without Subscribe: %v", err)
	}
	var ve *message.ValidationError
	if err := c.Subscribe("bad topic", "*", ok); !errors.As(err, &ve) || ve.Field != "topic" {
		t.Fatalf("bad topic: %v", err)
	}
	if err := c.Subscribe("%RETRY%cg", "*", ok); !errors.As(err, &ve) {
		t.Fatalf("retry topic: %v", err)
	}
	if err := c.Subscribe("T", "a\x01b", ok); !errors.As(err, &ve) || ve.Field != "tag" {
		t.Fatalf("bad tag: %v", err)
	}
	if err := c.Subscribe("T", "*", nil); err == nil {
		t.Fatal("nil handler accepted")
	}
	if err := c.Subscribe("T", "TagB || TagA", ok); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("T", "*", ok); err == nil {
		t.Fatal("double subscription accepted")
	}

	body, err := json.Marshal(c.heartbeatData())
	if err != nil {
		t.Fatal(err)
	}
	var hb struct {
		ProducerDataSet []json.RawMessage `json:"producerDataSet"`
		ConsumerDataSet []struct {
			GroupName, ConsumeType, MessageModel, ConsumeFromWhere string
			UnitMode                                               bool
			SubscriptionDataSet                                    []struct {
				Topic, SubString, ExpressionType string
				TagsSet, CodeSet                 []string
				SubVersion                       int64
				ClassFilterMode                  bool
			}
		} `json:"consumerDataSet"`
	}
	if err := json.Unmarshal(body, &hb); err != nil {
		t.Fatal(err)
	}
	if len(hb.ConsumerDataSet) != 1 {
		t.Fatalf("heartbeat %s", body)
	}
	cd := hb.ConsumerDataSet[0]
	if cd.GroupName != "cg" || cd.ConsumeType != "CONSUME_PASSIVELY" || cd.MessageModel != "CLUSTERING" || cd.ConsumeFromWhere != "CONSUME_FROM_FIRST_OFFSET" {
		t.Fatalf("consumer data %s", body)
	}
	subs := cd.SubscriptionDataSet
	if len(subs) != 2 || subs[0].Topic != "%RETRY%cg" || subs[1].Topic != "T" {
		t.Fatalf("subscriptions %s", body)
	}
	if subs[0].SubString != "*" || len(subs[0].TagsSet) != 0 || subs[0].CodeSet == nil || subs[0].ExpressionType != "TAG" {
		t.Fatalf("retry subscription %s", body)
	}
	if subs[1].SubString != "TagB || TagA" || strings.Join(subs[1].TagsSet, ",") != "TagA,TagB" ||
		strings.Join(subs[1].CodeSet, ",") != "2598919,2598920" || subs[1].SubVersion <= 0 {
		t.Fatalf("topic subscription %s", body)
	}
	// codeSet elements are JSON strings, as the Go client sends them.
	if !strings.Contains(string(body), `"codeSet":["2598919","2598920"]`) {
		t.Fatalf("codeSet not strings: %s", body)
	}
}

// When both the send-back and the fallback send fail, the message stays unfinished (the
// committed offset stops at it), its ReconsumeTimes grows, and it is handed to a worker
// again after the local retry delay.
func TestFailedSendBackKeepsOffsetAndRetriesLocally(t *testing.T) {
	c, err := NewPushConsumer(Config{NamesrvAddrs: []string{deadAddr(t)}, Group: "cg", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c.cfg.localRetryDelay = 20 * time.Millisecond
	calls := 0
	if err := c.Subscribe("T", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		calls++
		if string(msgs[0].Body) == "bad" {
			return message.ReconsumeLater, nil
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	mq := message.MessageQueue{Topic: "T", BrokerName: "gone", QueueID: 0}
	pq := newProcessQueue(mq, 10)
	msgs := []*message.MessageExt{
		{Message: message.Message{Topic: "T", Body: []byte("good")}, QueueOffset: 10, BrokerName: "gone"},
		{Message: message.Message{Topic: "T", Body: []byte("bad")}, QueueOffset: 11, BrokerName: "gone"},
		{Message: message.Message{Topic: "T", Body: []byte("good")}, QueueOffset: 12, BrokerName: "gone"},
	}
	pq.put(msgs, 13)
	c.consume(&consumeRequest{pq: pq, msgs: msgs[:1], topic: "T"})
	c.consume(&consumeRequest{pq: pq, msgs: msgs[2:], topic: "T"})
	if got := pq.commitOffset(); got != 11 {
		t.Fatalf("commit %d, want 11", got)
	}
	c.consume(&consumeRequest{pq: pq, msgs: msgs[1:2], topic: "T"})
	if got := pq.commitOffset(); got != 11 {
		t.Fatalf("commit after failed send-back %d, want 11 (the failed message)", got)
	}
	if msgs[1].ReconsumeTimes != 1 {
		t.Fatalf("reconsume times %d", msgs[1].ReconsumeTimes)
	}
	select {
	case req := <-c.consumeCh:
		if len(req.msgs) != 1 || req.msgs[0] != msgs[1] || req.pq != pq {
			t.Fatalf("retried %+v", req)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no local retry")
	}
	if calls != 3 {
		t.Fatalf("%d handler calls", calls)
	}
}
