package kafka

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// TestNewPartitionWithoutLeaderIsNotWarned: a partition just created answers
// NOT_LEADER_FOR_PARTITION until its leader is elected; resolving its start offset is
// retried at debug level, not with a WARN per retry (every consumer Start logged ten
// or more for the retry topics it had just created).
func TestNewPartitionWithoutLeaderIsNotWarned(t *testing.T) {
	c := newCluster(t, 1, "fresh")
	var refused atomic.Int32
	c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if refused.Load() >= 5 {
			return nil, nil, false // the leader is there: answered normally from now on
		}
		c.KeepControl()
		refused.Add(1)
		r := req.(*kmsg.ListOffsetsRequest)
		resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = 6 // NOT_LEADER_FOR_PARTITION
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	brokers := c.ListenAddrs()
	logs, logger := testkit.CaptureLogs(t)
	cfg := fastConfig(t, brokers, "g-fresh")
	cfg.Logger = logger
	var got seen
	cons := startConsumer(t, cfg, func(cons *Consumer) {
		if err := cons.Subscribe("fresh", "*", recordOK(&got)); err != nil {
			t.Fatal(err)
		}
	})
	p := newProducer(t, brokers, nil)
	if _, err := p.Send(ctxT(t, 10*time.Second), message.NewMessage("fresh", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, func() bool { return got.len() == 1 }, "the message consumed once the partition has a leader")
	if refused.Load() < 5 {
		t.Fatalf("only %d ListOffsets refused: the retry path was not exercised", refused.Load())
	}
	quiet := 0
	for _, r := range logs.Records() {
		if r.Level >= slog.LevelWarn {
			t.Errorf("warned while the partition had no leader: %s", r)
		}
		if r.Message == "kafka: the partition has no leader yet; resolving its start offset again" {
			quiet++
		}
	}
	if quiet == 0 {
		t.Error("the retries were not logged at debug level")
	}
	shutdown(t, cons, 10*time.Second)
	shutdown(t, p, 10*time.Second)
}
