package wire

import (
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/remoting"
)

// benchSendHeader is a typical SEND_MESSAGE_V2 header: tags, keys and a unique key.
var benchSendHeader = SendHeader{ProducerGroup: "pg", Topic: "T", DefaultTopic: "TBW102", DefaultTopicQueueNums: 4, QueueID: 3,
	SysFlag: 1, BornTimestamp: 1700000000000, Flag: 7, Properties: "TAGS\x01a\x02KEYS\x01k1\x02UNIQ_KEY\x01AC110001000018B4AAC2",
	MaxReconsumeTimes: 16, BrokerName: "broker-a"}

func BenchmarkEncodeSendHeader(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = benchSendHeader.Ext()
	}
}

func BenchmarkDecodeSendHeader(b *testing.B) {
	req := remoting.NewRequest(remoting.SendMessageV2, benchSendHeader.Ext(), nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSendHeader(req, true); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeSendHeaderList(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = benchSendHeader.ExtList()
	}
}

func BenchmarkDecodeSendHeaderList(b *testing.B) {
	req := remoting.NewRequest(remoting.SendMessageV2, nil, nil)
	req.ExtList = benchSendHeader.ExtList()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSendHeader(req, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendRequestFrame: a producer's SEND_MESSAGE_V2 header (1 KiB body) from
// SendHeader to frame and, as a broker reads it, from frame back to SendHeader: "map"
// through ExtFields (Ext, DecodeFrame), "list" through ExtList (ExtList,
// DecodeFrameExtList).
func BenchmarkSendRequestFrame(b *testing.B) {
	body := make([]byte, 1024)
	for _, list := range []bool{false, true} {
		name := "map"
		if list {
			name = "list"
		}
		b.Run(name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			defer testkit.ReportCPU(b)()
			for b.Loop() {
				req := remoting.NewRequest(remoting.SendMessageV2, nil, body)
				if list {
					req.ExtList = benchSendHeader.ExtList()
				} else {
					req.ExtFields = benchSendHeader.Ext()
				}
				if _, err := req.Encode(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/decode", func(b *testing.B) {
			f, err := remoting.NewRequest(remoting.SendMessageV2, benchSendHeader.Ext(), body).Encode()
			if err != nil {
				b.Fatal(err)
			}
			decode := remoting.DecodeFrame
			if list {
				decode = remoting.DecodeFrameExtList
			}
			b.ReportAllocs()
			defer testkit.ReportCPU(b)()
			for b.Loop() {
				req, _, err := decode(f[4:])
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ParseSendHeader(req, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodePullHeader(b *testing.B) {
	h := PullHeader{ConsumerGroup: "g", Topic: "T", QueueID: 1, QueueOffset: 100, MaxMsgNums: 32, SysFlag: 6,
		SuspendTimeoutMillis: 20000, Subscription: "*", ExpressionType: ExpressionTypeTag}
	req := remoting.NewRequest(remoting.PullMessage, h.Ext(), nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParsePullHeader(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseTopicRouteData(b *testing.B) {
	body := []byte(fastjsonRoute)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseTopicRouteData("T", body); err != nil {
			b.Fatal(err)
		}
	}
}
