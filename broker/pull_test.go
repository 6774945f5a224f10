package broker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestPullBufferReuse: handlePull reads records into pooled buffers and puts a buffer
// back as soon as reply has encoded the answer. Concurrent pulls of different queues, on
// one connection and on several, must each get exactly their own records, intact (CRC
// checked): an answer whose body were still read from a buffer already reused by
// another pull would show another queue's records or a broken one.
func TestPullBufferReuse(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	setup := newClient(t)
	const (
		topic    = "PullReuse"
		queues   = 4
		perQueue = 40
	)
	createTopic(t, setup, b.Addr(), topic, queues)
	bodyOf := func(q, i int) []byte {
		head := fmt.Sprintf("q%d-m%d-", q, i)
		return append([]byte(head), bytes.Repeat([]byte{byte('a' + q)}, 700+q*50)...)
	}
	for i := range perQueue {
		for q := range queues {
			if r := sendV1(t, setup, b.Addr(), topic, q, bodyOf(q, i), nil); r.ResponseCode() != remoting.Success {
				t.Fatalf("send q%d m%d: %d %s", q, i, r.Code, r.Remark)
			}
		}
	}
	clients := []*remoting.Client{newClient(t), newClient(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	const rounds = 30
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, q := clients[w%len(clients)], w%queues
			for round := range rounds {
				off := int64((round * 7) % (perQueue - 5))
				ext := map[string]string{"consumerGroup": "g", "topic": topic, "queueId": strconv.Itoa(q),
					"queueOffset": strconv.FormatInt(off, 10), "maxMsgNums": "32", "sysFlag": strconv.Itoa(wire.PullFlagSubscription),
					"commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0", "expressionType": "TAG"}
				r, err := c.InvokeSync(ctx, b.Addr(), remoting.NewRequest(remoting.PullMessage, ext, nil))
				if err != nil || r.ResponseCode() != remoting.Success {
					t.Errorf("pull q%d at %d: %v %+v", q, off, err, r)
					return
				}
				ms, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true})
				if err != nil || len(ms) != min(32, perQueue-int(off)) {
					t.Errorf("pull q%d at %d: %d messages, %v", q, off, len(ms), err)
					return
				}
				for k, m := range ms {
					want := bodyOf(q, int(off)+k)
					if m.QueueID != int32(q) || m.QueueOffset != off+int64(k) || !bytes.Equal(m.Body, want) {
						t.Errorf("pull q%d at %d, message %d: queue %d offset %d body %.20q, want %.20q",
							q, off, k, m.QueueID, m.QueueOffset, m.Body, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
