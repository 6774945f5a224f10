package broker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// A held long-poll pull is woken only by a message its subscription matches, as Apache
// RocketMQ's hold service does: a pull for tag A (or for a SQL92 expression) stays held
// when a non-matching message arrives, and is answered with the matching message as soon
// as one arrives.
func TestLongPollWakesOnlyMatchingHolds(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.EnablePropertyFilter = true })
	c := newClient(t)
	for _, tc := range []struct {
		name, exprType, expr string
		miss, hit            map[string]string // properties of the non-matching and the matching message
	}{
		{"tag", "TAG", "A", map[string]string{"TAGS": "B"}, map[string]string{"TAGS": "A"}},
		{"sql92", "SQL92", "a > 5", map[string]string{"a": "1"}, map[string]string{"a": "10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := "LP" + tc.name
			createTopic(t, c, b.Addr(), topic, 1)
			type answer struct {
				r    *remoting.RemotingCommand
				err  error
				when time.Time
			}
			got := make(chan answer, 1)
			go func() {
				ext := map[string]string{"consumerGroup": "g", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
					"sysFlag": strconv.Itoa(wire.PullFlagSubscription | wire.PullFlagSuspend), "commitOffset": "0", "suspendTimeoutMillis": "20000",
					"subscription": tc.expr, "subVersion": "0", "expressionType": tc.exprType}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				r, err := c.InvokeSync(ctx, b.Addr(), remoting.NewRequest(remoting.PullMessage, ext, nil))
				got <- answer{r, err, time.Now()}
			}()
			testkit.WaitFor(t, 10*time.Second, func() bool {
				b.arrivals.mu.Lock()
				defer b.arrivals.mu.Unlock()
				return len(b.arrivals.waiters[queueKey{topic, 0}]) == 1
			}, "the pull to be held")

			sendV1(t, c, b.Addr(), topic, 0, []byte("miss"), tc.miss)
			// The hook ran before the send was answered: a woken pull answers within
			// milliseconds. Watch for half a second.
			if testkit.Eventually(500*time.Millisecond, func() bool { return len(got) > 0 }) {
				a := <-got
				t.Fatalf("a non-matching message answered the held pull: %v code %d %q", a.err, a.r.Code, a.r.Remark)
			}
			sent := time.Now()
			sendV1(t, c, b.Addr(), topic, 0, []byte("hit"), tc.hit)
			var a answer
			select {
			case a = <-got:
			case <-time.After(15 * time.Second):
				t.Fatal("the matching message did not answer the held pull")
			}
			if a.err != nil || a.r.ResponseCode() != remoting.Success {
				t.Fatalf("held pull: %v %+v", a.err, a.r)
			}
			ms, _ := message.DecodeRecords(a.r.Body, message.DecodeOptions{})
			if len(ms) != 1 || string(ms[0].Body) != "hit" {
				t.Fatalf("held pull answered with %d messages", len(ms))
			}
			// Promptly: well before the 20 s hold would have ended (a bound on the
			// outcome: woken by the arrival, not by the hold's timer).
			if d := a.when.Sub(sent); d > 10*time.Second {
				t.Fatalf("answered %v after the matching message", d)
			}
		})
	}
}
