package retrytask_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/retrytask"
)

// A send parked by redismw.Park (written here by hand) is resent by one run of the
// task through the raw send.
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	msg := message.NewMessage("Orders", []byte("order 42")).SetTag("Created")
	rec := redismw.NewParkedRecord(msg, errors.New("broker down"), time.Now().Add(-2*time.Minute), nil)
	raw, _ := json.Marshal(rec)
	rdb.RPush(context.Background(), redismw.NewParkKeys("shop").Pending, raw)

	send := func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
		fmt.Printf("resent %s/%s: %s\n", m.Topic, m.Tag(), m.Body)
		return &message.SendResult{Status: message.SendOK}, nil
	}
	task, err := retrytask.New(retrytask.Config{Client: rdb, Namespace: "shop", Send: send,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer task.Shutdown(context.Background())
	st, err := task.RunOnce(context.Background(), retrytask.Shard{})
	fmt.Println(st.Sent, err)
	// Output:
	// resent Orders/Created: order 42
	// 1 <nil>
}
