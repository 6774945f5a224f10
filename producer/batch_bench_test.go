package producer

import (
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// BenchmarkPrepareBatch: what SendBatch does before the network for 64 new 1 KiB
// messages without properties (as `sluice bench produce --mode batch` sends them):
// checks, UNIQ_KEYs, the encoded body and the joined MsgID. MB/s counts bodies.
func BenchmarkPrepareBatch(b *testing.B) {
	p := &Producer{cfg: Config{Group: "bench", MaxMessageSize: DefaultMaxMessageSize}}
	body := make([]byte, 1024)
	msgs := make([]*message.Message, 64)
	b.SetBytes(int64(len(msgs) * len(body)))
	b.ReportAllocs()
	defer testkit.ReportCPU(b)()
	for b.Loop() {
		for i := range msgs {
			msgs[i] = message.NewMessage("BenchTopic", body)
		}
		if _, err := p.prepareBatch(msgs); err != nil {
			b.Fatal(err)
		}
	}
}
