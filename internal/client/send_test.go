package client

import (
	"reflect"
	"testing"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

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
