package consumer

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestUndecodableBodiesGoToDLQ: a stored body flagged compressed that is not zlib, and a
// zlib bomb past MaxDecompressedSize, never reach the handler (neither as raw bytes nor
// inflated); each goes to %DLQ%<group> once, and the good message after them is
// delivered.
func TestUndecodableBodiesGoToDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("Bombs", 1)
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	bomb, err := message.Deflate(make([]byte, 4<<20), 9) // 4 MiB of zeros, about 4 KiB compressed
	if err != nil {
		t.Fatal(err)
	}
	good, _ := message.Deflate([]byte("fine"), 5)
	for i, body := range [][]byte{[]byte("not zlib at all"), bomb, good} {
		ext := map[string]string{"a": "pg", "b": "Bombs", "c": "TBW102", "d": "4", "e": "0", "f": "1",
			"g": strconv.FormatInt(time.Now().UnixMilli(), 10), "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rc.InvokeSync(ctx, e.broker.Addr(), remoting.NewRequest(remoting.SendMessageV2, ext, body))
		cancel()
		if err != nil || resp.ResponseCode() != remoting.Success {
			t.Fatalf("send %d: %v %v", i, resp, err)
		}
	}
	rec := &recorder{}
	c := e.push(Config{Group: "bombs", ConsumeFromWhere: ConsumeFromFirstOffset, MaxDecompressedSize: 1 << 20})
	if err := c.Subscribe("Bombs", "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			rec.add("c", m)
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return len(e.dlq("bombs")) >= 2 }, "two dead letters")
	testkit.WaitFor(t, 10*time.Second, func() bool { return rec.count() >= 1 }, "the good message")
	if got := rec.bodies(); len(got) != 1 || got[0] != "fine(rt=0)" {
		t.Fatalf("handler saw %v", got)
	}
	dl := e.dlq("bombs")
	if len(dl) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dl))
	}
	// The dead letters keep the stored bytes and the compressed flag: nothing is lost.
	for _, d := range dl {
		if d.Message.SysFlag&message.SysFlagCompressed == 0 || len(d.Message.Body) == 0 {
			t.Errorf("dead letter %d: sysFlag %#x, body %d bytes", d.Message.QueueOffset, d.Message.SysFlag, len(d.Message.Body))
		}
	}
}
