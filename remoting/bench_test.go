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

// sendResponseFrame is the frame (without its length field) of a send response as a
// broker answers SEND_MESSAGE_V2: the ext fields of Java's SendMessageResponseHeader and
// the broker's MSG_REGION and TRACE_ON.
func sendResponseFrame(tb testing.TB, st SerializeType) []byte {
	tb.Helper()
	r := NewResponse(Success, "")
	r.Opaque = 77
	r.ExtList = []ExtField{{"MSG_REGION", "DefaultRegion"}, {"TRACE_ON", "true"},
		{"msgId", "7F00000100002A9F00000000000F4240"}, {"queueId", "3"}, {"queueOffset", "1234567"}}
	f, err := r.EncodeAs(st)
	if err != nil {
		tb.Fatal(err)
	}
	return f[4:]
}

// BenchmarkDecodeHeader decodes the header of a send response and of a SEND_MESSAGE_V2
// request as a connection's reader does (decodeFrameExt into a scratch list, then the
// list the command keeps): the client's and the broker's per-send header decode.
func BenchmarkDecodeHeader(b *testing.B) {
	for _, tc := range decodeHeaderCases(b) {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var scratch [32]ExtField
			for b.Loop() {
				cmd, _, ext, _, err := decodeFrameExt(tc.frame, scratch[:0])
				if err != nil {
					b.Fatal(err)
				}
				cmd.ExtList = extListOf(ext)
			}
		})
	}
}

// decodeHeaderCase is a frame (without its length field) for the header decode benchmarks.
type decodeHeaderCase struct {
	name  string
	frame []byte
}

// decodeHeaderCases are a send response and a SEND_MESSAGE_V2 request with binary headers.
func decodeHeaderCases(b *testing.B) []decodeHeaderCase {
	req := benchCommand()
	req.Code = int16(SendMessageV2)
	req.ExtList = []ExtField{{"a", "ProducerGroupName"}, {"b", "TopicTest"}, {"c", "TBW102"}, {"d", "4"},
		{"e", "1"}, {"f", "0"}, {"g", "1700000000000"}, {"h", "0"}, {"i", "UNIQ_KEY\x017F00000100002A9F00000000000F4240"},
		{"j", "0"}, {"k", "false"}, {"l", "-1"}, {"m", "false"}, {"n", "broker-a"}}
	req.ExtFields = nil
	reqFrame, err := req.EncodeBinary()
	if err != nil {
		b.Fatal(err)
	}
	return []decodeHeaderCase{{"send-response", sendResponseFrame(b, SerializeRocketMQ)}, {"send-request", reqFrame[4:]}}
}
