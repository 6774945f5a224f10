package producer

// Tests against the real Sluice broker (embedded name server, real TCP and files).

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func startBroker(t *testing.T, maxMessageSize int) *broker.Broker {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{MaxMessageSize: maxMessageSize})
	return b
}

func TestBrokerAutoCreatesTopic(t *testing.T) {
	b := startBroker(t, 0)
	p := newProducer(t, Config{NamesrvAddrs: strings.Split(b.NamesrvAddr(), ";"), Group: "pg"})
	seen := map[int]bool{}
	for i := 0; i < 8; i++ {
		r, err := p.SendSync(context.Background(), message.NewMessage("FreshTopic", []byte("hello")).SetTag("t"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != message.SendOK || r.Queue.BrokerName != b.Name() || r.Queue.QueueID >= 4 {
			t.Fatalf("result %+v", r)
		}
		if _, _, err := message.ParseOffsetMsgID(r.OffsetMsgID); err != nil {
			t.Fatalf("offset msg id %q: %v", r.OffsetMsgID, err)
		}
		seen[r.Queue.QueueID] = true
	}
	if len(seen) != 4 {
		t.Fatalf("queues used %v, want the 4 of the auto-created topic", seen)
	}
	// The broker registered the new topic: the name server now has its own route.
	cl, err := client.New(client.Config{NamesrvAddrs: strings.Split(b.NamesrvAddr(), ";"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rd *wire.TopicRouteData
	testkit.WaitFor(t, 20*time.Second, func() bool {
		rd, err = cl.FetchRoute(context.Background(), "FreshTopic")
		return err == nil || !errors.Is(err, client.ErrTopicNotExist)
	}, "the route of the auto-created topic")
	if err != nil {
		t.Fatalf("route of the auto-created topic: %v", err)
	}
	if qs, _ := wire.PublishQueues("FreshTopic", rd); len(qs) != 4 {
		t.Fatalf("auto-created topic has %d write queues, want 4", len(qs))
	}
}

func TestBrokerRefusesOversizeWithoutRetry(t *testing.T) {
	b := startBroker(t, 1024)
	// The producer's own limit is the default 4 MiB, so the broker's 1 KiB limit decides.
	p := newProducer(t, Config{NamesrvAddrs: strings.Split(b.NamesrvAddr(), ";")})
	if _, err := p.SendSync(context.Background(), message.NewMessage("Big", []byte("small"))); err != nil {
		t.Fatal(err)
	}
	_, err := p.SendSync(context.Background(), message.NewMessage("Big", make([]byte, 2000)))
	var se *SendError
	var re *remoting.ResponseError
	if !errors.As(err, &se) || se.Attempts != 1 || se.Retryable() {
		t.Fatalf("oversize send: %v", err)
	}
	// The broker's answer is the one *remoting.ResponseError, found through the SendError.
	if !errors.As(err, &re) || re.Code != remoting.MessageIllegal || !strings.Contains(re.Remark, "1024") || re.Retryable() ||
		re.Request != remoting.SendMessageV2 || re.Broker == "" || re.Addr != se.BrokerAddr {
		t.Fatalf("oversize send: answer %#v, want 13 MESSAGE_ILLEGAL naming the 1024-byte limit", re)
	}
}
