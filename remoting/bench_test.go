package remoting

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

func benchCommand() *RemotingCommand {
	c := NewRequest(SendMessage, map[string]string{
		"producerGroup": "ProducerGroupName", "topic": "TopicTest", "defaultTopic": "TBW102",
		"defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0", "bornTimestamp": "1700000000000",
		"flag": "0", "properties": "UNIQ_KEY\x01AC110001000018B4AAC2\x02WAIT\x01true\x02TAGS\x01TagA\x02",
		"reconsumeTimes": "0", "unitMode": "false", "batch": "false",
	}, make([]byte, 1024))
	c.Opaque = 123456
	return c
}

func BenchmarkEncode(b *testing.B) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		b.Run(st.String(), func(b *testing.B) {
			c := benchCommand()
			b.ReportAllocs()
			defer testkit.ReportCPU(b)()
			for i := 0; i < b.N; i++ {
				f, err := c.EncodeAs(st)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(f)))
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		b.Run(st.String(), func(b *testing.B) {
			f, _ := benchCommand().EncodeAs(st)
			b.SetBytes(int64(len(f)))
			b.ReportAllocs()
			defer testkit.ReportCPU(b)()
			for i := 0; i < b.N; i++ {
				if _, _, err := DecodeFrame(f[4:]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchServer(b *testing.B) (*Server, *Client) {
	s := startServer(b, ServerConfig{})
	s.Handle(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		return NewResponse(Success, "").SetExt("msgId", "AC110001000018B4AAC2").SetExt("queueId", "1").SetExt("queueOffset", "42")
	})
	return s, newClient(b, ClientConfig{})
}

// BenchmarkInvokeSync measures one request/response round trip over loopback TCP.
func BenchmarkInvokeSync(b *testing.B) {
	s, c := benchServer(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.InvokeSync(ctx, s.Addr(), benchCommand()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInvokeSyncParallel measures round trips from many goroutines sharing one connection.
func BenchmarkInvokeSyncParallel(b *testing.B) {
	s, c := benchServer(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.InvokeSync(ctx, s.Addr(), benchCommand()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
