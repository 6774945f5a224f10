package producer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// A counting campaign through the SDK against the real broker, whose reader stores the
// sends of a connection in runs (one commitlog write per run): several producers send
// asynchronously at once (sends of the largest size among them, commitlog segments so
// small that runs cross them all the time), with no retry, so that each send is stored
// at most once. Every send succeeds, and each message is in the queue its result names,
// at the queue offset and with the offset message id of its result, exactly once;
// queue offsets are dense and nothing else is stored.
func TestSendAsyncBurstsCounted(t *testing.T) {
	const maxSize = 64 << 10
	b, _ := testbroker.Start(t, broker.Config{MaxMessageSize: maxSize, MappedFileSizeCommitLog: maxSize + 64<<10})
	namesrvs := testbroker.Namesrv(b)
	const topic, queues = "AsyncCampaign", 4
	createTopic(t, namesrvs, topic, queues)

	const producers, perProducer = 4, 400
	type sent struct {
		res *message.SendResult
		err error
	}
	results := make([][]sent, producers)
	var wg sync.WaitGroup
	for p := range producers {
		results[p] = make([]sent, perProducer)
		pr := newProducer(t, Config{NamesrvAddrs: namesrvs, Group: "campaign-pg", CompressMsgBodyOverHowmuch: -1,
			RetryTimesWhenSendAsyncFailed: -1, SendTimeout: 30 * time.Second, MaxMessageSize: maxSize})
		wg.Add(perProducer)
		for i := range perProducer {
			size := 50 + (i*131)%3000
			if (p+i)%29 == 0 {
				size = maxSize - 256 // the largest the producer allows, with the properties
			}
			key := fmt.Sprintf("p%d-i%d", p, i)
			body := []byte(key + "|" + strings.Repeat("z", size-len(key)-1))
			msg := message.NewMessage(topic, body).SetTag("t").SetKeys(key)
			err := pr.SendAsync(context.Background(), msg, func(r *message.SendResult, err error) {
				results[p][i] = sent{r, err}
				wg.Done()
			})
			if err != nil {
				results[p][i] = sent{nil, err}
				wg.Done()
			}
		}
	}
	wg.Wait()

	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type place struct {
		queue  int
		offset int64
		id     string
	}
	stored := map[string]place{}
	for q := range queues {
		var off int64
		for range 10_000 { // bounded: far more pulls than messages
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			msgs, next, err := pull(ctx, rc, b.Addr(), "campaign-g", topic, q, off)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) == 0 {
				break
			}
			for k, m := range msgs {
				if m.QueueOffset != off+int64(k) {
					t.Fatalf("queue %d: message at %d says %d", q, off+int64(k), m.QueueOffset)
				}
				key, _, _ := strings.Cut(string(m.Body), "|")
				if _, dup := stored[key]; dup {
					t.Fatalf("%s stored twice", key)
				}
				stored[key] = place{q, m.QueueOffset, message.OffsetMsgID(m.StoreHost, m.CommitLogOffset)}
			}
			off = next
		}
	}
	for p := range producers {
		for i, s := range results[p] {
			key := fmt.Sprintf("p%d-i%d", p, i)
			if s.err != nil || s.res == nil || s.res.Status != message.SendOK {
				t.Fatalf("%s: %+v %v", key, s.res, s.err)
			}
			pl, ok := stored[key]
			if !ok || pl.queue != s.res.Queue.QueueID || pl.offset != s.res.QueueOffset || pl.id != s.res.OffsetMsgID {
				t.Fatalf("%s: result %d/%d %s, stored %+v (found %v)", key, s.res.Queue.QueueID, s.res.QueueOffset, s.res.OffsetMsgID, pl, ok)
			}
		}
	}
	if len(stored) != producers*perProducer {
		t.Fatalf("%d messages stored, %d sent", len(stored), producers*perProducer)
	}
	t.Logf("%d async sends from %d producers: each stored once where its result says", len(stored), producers)
}
