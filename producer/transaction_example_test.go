package producer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// orderBook is a stand-in for a local database: ExecuteLocalTransaction records the
// order in the same transaction as the message's fate, CheckLocalTransaction reads it.
type orderBook struct {
	mu     sync.Mutex
	orders map[string]bool // order key → committed
}

func (b *orderBook) ExecuteLocalTransaction(_ context.Context, m *message.Message) producer.LocalTransactionState {
	ok := string(m.Body) != "invalid"
	b.mu.Lock()
	b.orders[m.Property(message.PropertyKeys)] = ok
	b.mu.Unlock()
	if !ok {
		return producer.RollbackMessage
	}
	return producer.CommitMessage
}

func (b *orderBook) CheckLocalTransaction(_ context.Context, m *message.MessageExt) producer.LocalTransactionState {
	b.mu.Lock()
	defer b.mu.Unlock()
	committed, known := b.orders[m.Property(message.PropertyKeys)]
	switch {
	case !known:
		return producer.Unknown // still running: ask again later
	case committed:
		return producer.CommitMessage
	}
	return producer.RollbackMessage
}

// A transactional message is delivered only if the local transaction commits.
func ExampleTransactionProducer() {
	nsAddr, stop := exampleBroker()
	defer stop()

	tp, err := producer.NewTransactionProducer(producer.Config{
		NamesrvAddrs: []string{nsAddr},
		Group:        "orders-tx-producer",
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, &orderBook{orders: map[string]bool{}})
	if err != nil {
		log.Fatal(err)
	}
	if err := tp.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	}()

	for _, body := range []string{"paid", "invalid"} {
		msg := message.NewMessage("OrderEvents", []byte(body)).SetKeys("order-" + body)
		r, err := tp.SendMessageInTransaction(context.Background(), msg)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(body, r.Status, r.State, r.EndTransactionErr)
	}

	// Delayed transactional messages are refused before anything is sent.
	_, err = tp.SendMessageInTransaction(context.Background(), message.NewMessage("OrderEvents", []byte("later")).SetDelayLevel(2))
	var ve *message.ValidationError
	fmt.Println(errors.As(err, &ve), ve.Field)
	// Output:
	// paid SEND_OK COMMIT_MESSAGE <nil>
	// invalid SEND_OK ROLLBACK_MESSAGE <nil>
	// true delay level
}
