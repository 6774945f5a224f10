package store_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/message"
)

func Example() {
	dir, _ := os.MkdirTemp("", "store-example")
	defer os.RemoveAll(dir)

	s, err := store.Open(store.Config{Dir: dir, CommitLogSegmentSize: 1 << 20, FlushDiskType: store.SyncFlush})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	msg := &message.MessageExt{
		Message:   message.Message{Topic: "OrderTopic", Body: []byte("order 42 paid")},
		QueueID:   0,
		BornHost:  netip.MustParseAddrPort("127.0.0.1:50000"),
		StoreHost: netip.MustParseAddrPort("127.0.0.1:10911"),
	}
	msg.SetTag("paid")
	res, err := s.PutMessage(context.Background(), msg, message.TagHashCode("paid"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status, "queue offset", res.QueueOffset, "commitlog offset", res.CommitLogOffset)

	got, err := s.GetMessage("OrderTopic", 0, 0, 32, 0, nil)
	if err != nil {
		log.Fatal(err)
	}
	msgs, _ := message.DecodeRecords(got.Body, message.DecodeOptions{})
	fmt.Println(got.Status, got.NextBeginOffset, string(msgs[0].Body), msgs[0].Tag())

	next, _ := s.GetMessage("OrderTopic", 0, got.NextBeginOffset, 32, 0, nil)
	fmt.Println(next.Status)
	// Output:
	// PUT_OK queue offset 0 commitlog offset 0
	// FOUND 1 order 42 paid paid
	// OFFSET_OVERFLOW_ONE
}
