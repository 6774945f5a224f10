package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/retrytask"
)

// SIGTERM while the retry task is mid-batch: Run returns within the deadline, the task
// stops between records before the producer is shut down, every parked record is either
// sent once or still in Redis (none in processing, none lost), and no goroutine is left
// (goleak in TestMain).
func TestSIGTERMMidBatch(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		const n = 200
		for i := 0; i < n; i++ {
			m := message.NewMessage("Orders", []byte("o"+strconv.Itoa(i))).SetProperty("seq", strconv.Itoa(i))
			b, _ := json.Marshal(redismw.NewParkedRecord(m, errors.New("broker down"), time.Now(), nil))
			if err := c.RPush(context.Background(), redismw.NewParkKeys(ns).Pending, b).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		sent := map[string]int{}
		var order []string
		producerClosed := false
		send := func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
			select { // a send takes a little while (network latency)
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			mu.Lock()
			defer mu.Unlock()
			if producerClosed {
				return nil, errors.New("producer closed")
			}
			sent[m.Property("seq")]++
			return &message.SendResult{Status: message.SendOK}, nil
		}
		task, err := retrytask.New(retrytask.Config{Client: c, Namespace: ns, Send: send, MinAge: -1, BatchSize: 50, Logger: testkit.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		g, _ := New(Config{Logger: testkit.Quiet(), Timeout: 10 * time.Second})
		must(t, g.AddRetryTask("retry", ShutdownFunc(func(ctx context.Context) error {
			err := task.Shutdown(ctx)
			mu.Lock()
			order = append(order, "retry")
			mu.Unlock()
			return err
		})))
		must(t, g.AddProducer("producer", ShutdownFunc(func(ctx context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			producerClosed = true
			order = append(order, "producer")
			return nil
		})))
		if err := task.Start(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- g.Run(context.Background()) }()
		sentSoFar := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(sent)
		}
		testkit.WaitFor(t, 30*time.Second, func() bool { return sentSoFar() >= 20 && signalInstalled(g) },
			"20 sent and the signal handler installed: ", func() string { return fmt.Sprintf("%d sent", sentSoFar()) })
		start := time.Now()
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return after SIGTERM")
		}
		took := time.Since(start)
		cn, err := task.Counts(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for seq, k := range sent {
			if k != 1 {
				t.Fatalf("record %s sent %d times", seq, k)
			}
		}
		if cn.Processing != 0 || int64(len(sent))+cn.Total() != n || cn.Dead != 0 {
			t.Fatalf("after shutdown: %d sent, counts %+v; want %d in all, none processing", len(sent), cn, n)
		}
		if len(order) != 2 || order[0] != "retry" {
			t.Fatalf("stop order %v", order)
		}
		if len(sent) == n {
			t.Logf("all %d records were sent before the signal took effect (took %v)", n, took)
		}
	})
}
