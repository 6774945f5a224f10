package broker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// The send handlers give their request frames back for reuse (ReleaseBody) once the store
// has the message. These tests store many distinct bodies from concurrent pipelined
// connections, in both flush modes, as single sends (both headers and both header
// encodings), batches (frames up to and over the 128 KiB pooled size), delayed messages
// and transactional half messages, and read every message back to compare it byte for
// byte: a frame reused while the store, the scheduler or the transaction path still read
// it shows as a wrong body (and, under -race, as a data race).

const recycleTopic = "RecycleT"

// recycleBody is message id's body: distinct per id, 8 bytes to 24 KiB.
func recycleBody(id int) []byte { return testkit.SeqBody(id, 8+(id*7919)%(24<<10), 0x5eed) }

// recycleSendExt is the header of a send of one message with properties props.
func recycleSendExt(v2 bool, queueID int, sysFlag int, props map[string]string) map[string]string {
	if v2 {
		return map[string]string{"a": "pg", "b": recycleTopic, "c": "TBW102", "d": "4", "e": strconv.Itoa(queueID),
			"f": strconv.Itoa(sysFlag), "g": strconv.FormatInt(time.Now().UnixMilli(), 10), "h": "0",
			"i": message.MarshalProperties(props), "j": "0", "k": "false", "m": "false"}
	}
	return map[string]string{"producerGroup": "pg", "topic": recycleTopic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": strconv.Itoa(queueID), "sysFlag": strconv.Itoa(sysFlag), "bornTimestamp": strconv.FormatInt(time.Now().UnixMilli(), 10),
		"flag": "0", "properties": message.MarshalProperties(props), "reconsumeTimes": "0", "unitMode": "false",
		"maxReconsumeTimes": "0", "batch": "false"}
}

// recycleRequest builds request number r of a producer: a single send (SEND_MESSAGE or
// SEND_MESSAGE_V2), a delayed single send, a transactional half message or a batch.
// ids receives the ids of the messages it carries; half reports a half message.
func recycleRequest(t *testing.T, r int, next *int) (req *remoting.RemotingCommand, ids []int, half bool) {
	t.Helper()
	queueID := r % 4
	id := func() int { *next++; return *next - 1 }
	switch r % 6 {
	case 0, 1: // single send
		i := id()
		props := map[string]string{"rid": strconv.Itoa(i)}
		code := remoting.SendMessage
		if r%6 == 1 {
			code = remoting.SendMessageV2
		}
		return remoting.NewRequest(code, recycleSendExt(r%6 == 1, queueID, 0, props), recycleBody(i)), []int{i}, false
	case 2: // delayed: parked in SCHEDULE_TOPIC_XXXX, delivered from the stored record
		i := id()
		props := map[string]string{"rid": strconv.Itoa(i), message.PropertyDelayTimeLevel: "1"}
		return remoting.NewRequest(remoting.SendMessageV2, recycleSendExt(true, queueID, 0, props), recycleBody(i)), []int{i}, false
	case 3: // half message: committed later from the stored record
		i := id()
		props := map[string]string{"rid": strconv.Itoa(i), "TRAN_MSG": "true", "PGROUP": "tx-group", "UNIQ_KEY": fmt.Sprintf("U%08d", i)}
		return remoting.NewRequest(remoting.SendMessageV2, recycleSendExt(true, queueID, 4, props), recycleBody(i)), []int{i}, true
	default: // batch of 2..12 messages: frames from a few KiB to over 128 KiB
		var msgs []*message.Message
		for range 2 + (r*5)%11 {
			i := id()
			ids = append(ids, i)
			msgs = append(msgs, &message.Message{Topic: recycleTopic, Body: recycleBody(i), Properties: map[string]string{"rid": strconv.Itoa(i)}})
		}
		body, err := message.EncodeBatch(msgs, 0)
		if err != nil {
			t.Fatal(err)
		}
		ext := recycleSendExt(true, queueID, 0, nil)
		ext["m"] = "true"
		return remoting.NewRequest(remoting.SendBatchMessage, ext, body), ids, false
	}
}

func TestRecycledFramesKeepStoredBodies(t *testing.T) {
	for _, flush := range []string{"ASYNC_FLUSH", "SYNC_FLUSH"} {
		t.Run(flush, func(t *testing.T) {
			b := startBroker(t, t.TempDir(), func(c *Config) {
				c.FlushDiskType = flush
				c.MessageDelayLevel = "200ms"
				c.MappedFileSizeCommitLog = 64 << 20
			})
			admin := newClient(t)
			createTopic(t, admin, b.Addr(), recycleTopic, 4)

			// Four producers (two per header encoding), each with its own connection and
			// up to 32 requests in flight, so that each reader takes bursts of frames.
			const producers, requests, inFlight = 4, 90, 32
			type sent struct {
				ids  []int
				half *remoting.RemotingCommand
			}
			var (
				mu     sync.Mutex
				stored []sent
				errs   []error
			)
			var wg sync.WaitGroup
			for p := range producers {
				st := remoting.SerializeJSON
				if p%2 == 1 {
					st = remoting.SerializeRocketMQ
				}
				c, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet(), SerializeType: st})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				type request struct {
					req  *remoting.RemotingCommand
					ids  []int
					half bool
				}
				reqs := make([]request, requests)
				next := p * 1_000_000
				for r := range reqs {
					reqs[r].req, reqs[r].ids, reqs[r].half = recycleRequest(t, r+p, &next)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					slots := make(chan struct{}, inFlight)
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					var calls sync.WaitGroup
					defer calls.Wait() // before cancel: the calls run under ctx
					for r, q := range reqs {
						req, ids, half := q.req, q.ids, q.half
						slots <- struct{}{}
						calls.Add(1)
						err := c.InvokeAsync(ctx, b.Addr(), req, func(resp *remoting.RemotingCommand, err error) {
							defer calls.Done()
							defer func() { <-slots }()
							if err == nil && resp.ResponseCode() != remoting.Success {
								err = fmt.Errorf("%d %s", resp.Code, resp.Remark)
							}
							mu.Lock()
							defer mu.Unlock()
							if err != nil {
								errs = append(errs, fmt.Errorf("producer %d request %d (ids %v): %w", p, r, ids, err))
								return
							}
							s := sent{ids: ids}
							if half {
								s.half = resp
							}
							stored = append(stored, s)
						})
						if err != nil {
							calls.Done()
							<-slots
							mu.Lock()
							errs = append(errs, fmt.Errorf("producer %d request %d: %w", p, r, err))
							mu.Unlock()
							return
						}
					}
				}()
			}
			wg.Wait()
			for _, err := range errs {
				t.Error(err)
			}
			if t.Failed() {
				t.FailNow()
			}
			want := map[int]bool{}
			for _, s := range stored {
				if s.half != nil {
					if r := endTxn(t, admin, b.Addr(), s.half, txnCommit); r.ResponseCode() != remoting.Success {
						t.Fatalf("commit of ids %v: %d %s", s.ids, r.Code, r.Remark)
					}
				}
				for _, id := range s.ids {
					want[id] = true
				}
			}

			// Read every queue until all messages (the delayed ones after their delivery)
			// are there; each body must be exactly the one sent with its id.
			got := map[int]bool{}
			offsets := make([]int64, 4)
			testkit.WaitFor(t, 20*time.Second, func() bool {
				for q := range 4 {
					for range 10_000 { // bounded: far more pulls than messages
						resp := pull(t, admin, b.Addr(), "recycle-g", recycleTopic, q, offsets[q], "*", 0)
						if resp.ResponseCode() != remoting.Success {
							break
						}
						msgs, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
						if err != nil {
							t.Fatalf("queue %d at %d: %v", q, offsets[q], err)
						}
						for _, m := range msgs {
							id, err := strconv.Atoi(m.Property("rid"))
							if err != nil || !want[id] {
								t.Fatalf("queue %d offset %d: message with rid %q was not sent", q, m.QueueOffset, m.Property("rid"))
							}
							if got[id] {
								t.Fatalf("message %d stored twice", id)
							}
							if wantBody := recycleBody(id); !bytes.Equal(m.Body, wantBody) {
								at := 0
								for at < min(len(m.Body), len(wantBody)) && m.Body[at] == wantBody[at] {
									at++
								}
								t.Fatalf("message %d: stored body of %d bytes differs from the %d bytes sent at byte %d", id, len(m.Body), len(wantBody), at)
							}
							got[id] = true
							offsets[q] = m.QueueOffset + 1
						}
					}
				}
				return len(got) == len(want)
			}, "all sent messages readable")
			if len(want) < 800 {
				t.Fatalf("only %d messages sent: the campaign is too small to mean anything", len(want))
			}
			t.Logf("%s: %d messages in %d requests stored and read back intact", flush, len(want), len(stored))
		})
	}
}
