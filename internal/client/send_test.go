package client

import (
	"reflect"
	"testing"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func TestSendHeaderExt(t *testing.T) {
	h := SendHeader{
		ProducerGroup: "pg", Topic: "T", DefaultTopic: "TBW102", DefaultTopicQueueNums: 4, QueueID: 3,
		SysFlag: 1, BornTimestamp: 1700000000000, Flag: 7, Properties: "TAGS\x01a",
		MaxReconsumeTimes: 16, BrokerName: "broker-a",
	}
	want := map[string]string{
		"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "1", "g": "1700000000000", "h": "7",
		"i": "TAGS\x01a", "j": "0", "k": "false", "l": "16", "m": "false", "n": "broker-a",
	}
	if got := h.Ext(); !reflect.DeepEqual(got, want) {
		t.Fatalf("ext %v\nwant %v", got, want)
	}
	h.Properties, h.BrokerName = "", ""
	if ext := h.Ext(); ext["i"] != "" || ext["n"] != "" {
		t.Fatalf("empty optional fields sent: %v", ext)
	}
}

func TestParseSendResponse(t *testing.T) {
	mq := message.MessageQueue{Topic: "T", BrokerName: "b", QueueID: 1}
	for code, status := range map[remoting.ResponseCode]message.SendStatus{
		remoting.Success:           message.SendOK,
		remoting.FlushDiskTimeout:  message.SendFlushDiskTimeout,
		remoting.SlaveNotAvailable: message.SendSlaveNotAvailable,
		remoting.FlushSlaveTimeout: message.SendFlushSlaveTimeout,
	} {
		if !SendStored(code) {
			t.Fatalf("%v not stored", code)
		}
		resp := remoting.NewResponse(code, "")
		resp.SetExt("msgId", "7F00000100002A9F0000000000000010").SetExt("queueId", "2").SetExt("queueOffset", "41")
		r, err := ParseSendResponse(resp, mq, "UNIQ")
		if err != nil {
			t.Fatal(err)
		}
		want := &message.SendResult{Status: status, MsgID: "UNIQ", OffsetMsgID: "7F00000100002A9F0000000000000010",
			Queue: message.MessageQueue{Topic: "T", BrokerName: "b", QueueID: 2}, QueueOffset: 41, RegionID: "DefaultRegion"}
		if !reflect.DeepEqual(r, want) {
			t.Fatalf("code %v: %+v", code, r)
		}
	}
	for _, c := range []remoting.ResponseCode{remoting.SystemError, remoting.MessageIllegal, remoting.TopicNotExist} {
		if SendStored(c) {
			t.Fatalf("%v counted as stored", c)
		}
	}
	bad := remoting.NewResponse(remoting.Success, "").SetExt("queueOffset", "x")
	if _, err := ParseSendResponse(bad, mq, ""); err == nil {
		t.Fatal("bad queueOffset accepted")
	}
}
