package client

import (
	"bytes"
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

// parseSendResponseRef is ParseSendResponse as it was before it read a list-form
// response in one pass: one accessor lookup per field. The reference it must agree with.
func parseSendResponseRef(resp *remoting.RemotingCommand, mq message.MessageQueue, msgID string) (*message.SendResult, error) {
	r := &message.SendResult{MsgID: msgID, Queue: mq, RegionID: "DefaultRegion"}
	switch resp.ResponseCode() {
	case remoting.FlushDiskTimeout:
		r.Status = message.SendFlushDiskTimeout
	case remoting.FlushSlaveTimeout:
		r.Status = message.SendFlushSlaveTimeout
	case remoting.SlaveNotAvailable:
		r.Status = message.SendSlaveNotAvailable
	default:
		r.Status = message.SendOK
	}
	r.OffsetMsgID, _ = resp.ExtString("msgId", false)
	if qid, err := resp.ExtInt32("queueId", false); err == nil {
		if v, _ := resp.Ext("queueId"); v != "" {
			r.Queue.QueueID = int(qid)
		}
	}
	off, err := resp.ExtInt64("queueOffset", false)
	if err != nil {
		return nil, err
	}
	r.QueueOffset = off
	if v, _ := resp.Ext(message.PropertyMsgRegion); v != "" {
		r.RegionID = v
	}
	r.TransactionID, _ = resp.Ext("transactionId")
	return r, nil
}

// TestParseSendResponseMatchesReference: for send responses in list form (as a producer
// receives them), in map form, and with both, with usual, repeated, missing, empty and
// malformed fields, ParseSendResponse gives the reference's result or error (same type
// and text), over JSON and binary headers as decoded off the wire too.
func TestParseSendResponseMatchesReference(t *testing.T) {
	mq := message.MessageQueue{Topic: "T", BrokerName: "b", QueueID: 1}
	F := func(kv ...string) []remoting.ExtField {
		var l []remoting.ExtField
		for i := 0; i+1 < len(kv); i += 2 {
			l = append(l, remoting.ExtField{Key: kv[i], Value: kv[i+1]})
		}
		return l
	}
	lists := [][]remoting.ExtField{
		F("MSG_REGION", "DefaultRegion", "TRACE_ON", "true", "msgId", "7F00000100002A9F00000000000F4240", "queueId", "3", "queueOffset", "1234567"),
		F("msgId", "A", "queueId", "0", "queueOffset", "0", "MSG_REGION", "region-x", "transactionId", "tx-1"),
		F("queueId", "2", "queueId", "5", "queueOffset", "1", "queueOffset", "9", "msgId", "a", "msgId", "b"), // repeated: the last wins
		F(), // no fields
		F("queueId", "", "queueOffset", "", "MSG_REGION", "", "msgId", ""),
		F("queueId", "x", "queueOffset", "7"),                // an unparsable queue id is ignored
		F("queueId", "2147483648", "queueOffset", "7"),       // out of int32 range: ignored
		F("queueId", "-1", "queueOffset", "-7"),              // negative values pass as before
		F("queueId", "+4", "queueOffset", "+8"),              // strconv's sign
		F("queueOffset", "x"),                                // malformed offset: the accessor's error
		F("queueOffset", "9223372036854775808"),              // out of int64 range
		F("queueOffset", "5", "queueOffset", " 5"),           // the last, malformed, wins
		F("queueOffset", "x", "queueOffset", "5"),            // the last, good, wins
		F("QUEUEOFFSET", "x", "msgid", "y", "queueId ", "3"), // no case folding, no trimming
	}
	codes := []remoting.ResponseCode{remoting.Success, remoting.FlushDiskTimeout, remoting.SlaveNotAvailable, remoting.FlushSlaveTimeout}
	for i, list := range lists {
		code := codes[i%len(codes)]
		list := func() *remoting.RemotingCommand {
			r := remoting.NewResponse(code, "")
			r.ExtList = append([]remoting.ExtField{}, list...)
			return r
		}
		mapped := func() *remoting.RemotingCommand { r := list(); r.ExtMap(); return r }
		both := func() *remoting.RemotingCommand { // a map field shadows the list's
			r := list()
			r.ExtFields = map[string]string{"queueOffset": "11", "msgId": "from-map"}
			return r
		}
		forms := map[string]func() *remoting.RemotingCommand{"list": list, "map": mapped, "both": both}
		for _, st := range []remoting.SerializeType{remoting.SerializeJSON, remoting.SerializeRocketMQ} {
			f, err := list().EncodeAs(st)
			if err != nil {
				t.Fatal(err)
			}
			forms["decoded-"+st.String()] = func() *remoting.RemotingCommand {
				r, _, err := remoting.DecodeFrameExtList(f[4:])
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
		}
		for name, resp := range forms {
			got, err := ParseSendResponse(resp(), mq, "UNIQ")
			want, werr := parseSendResponseRef(resp(), mq, "UNIQ")
			if (err == nil) != (werr == nil) || err != nil && (err.Error() != werr.Error() || reflect.TypeOf(err) != reflect.TypeOf(werr)) {
				t.Fatalf("case %d %s: error %v, reference %v", i, name, err, werr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("case %d %s:\n got %+v\nwant %+v", i, name, got, want)
			}
		}
	}
}

// TestParseSendResponseAllocs pins that parsing a list-form send response allocates the
// SendResult and nothing else.
func TestParseSendResponseAllocs(t *testing.T) {
	resp := remoting.NewResponse(remoting.Success, "")
	resp.ExtList = []remoting.ExtField{{Key: "MSG_REGION", Value: "DefaultRegion"}, {Key: "TRACE_ON", Value: "true"},
		{Key: "msgId", Value: "7F00000100002A9F00000000000F4240"}, {Key: "queueId", Value: "3"}, {Key: "queueOffset", Value: "1234567"}}
	mq := message.MessageQueue{Topic: "T", BrokerName: "b", QueueID: 1}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ParseSendResponse(resp, mq, "UNIQ"); err != nil {
			panic(err)
		}
	}); n != 1 {
		t.Fatalf("%v allocations per ParseSendResponse, want 1", n)
	}
}

// FuzzParseSendResponseRef: on any list of send-response fields (keys drawn from the
// ones it reads and near misses, values arbitrary), ParseSendResponse agrees with the
// reference in list form, map form and both, result and error alike.
func FuzzParseSendResponseRef(f *testing.F) {
	f.Add(byte(0), []byte("0\x001234567\x001\x003\x002\x007F000001\x003\x00DefaultRegion"))
	f.Add(byte(1), []byte("1\x00+8\x001\x00 3\x001\x00x\x004\x00tx\x005\x00true"))
	f.Add(byte(2), []byte("0\x009223372036854775808\x001\x002147483648\x000\x00\x000\x00-1"))
	keys := []string{"queueOffset", "queueId", "msgId", message.PropertyMsgRegion, "transactionId", "TRACE_ON", "queueid", "queueOffset "}
	codes := []remoting.ResponseCode{remoting.Success, remoting.FlushDiskTimeout, remoting.SlaveNotAvailable, remoting.FlushSlaveTimeout}
	f.Fuzz(func(t *testing.T, code byte, data []byte) {
		parts := bytes.Split(data, []byte{0})
		var list []remoting.ExtField
		for i := 0; i+1 < len(parts) && len(list) < 16; i += 2 {
			k := keys[0]
			if len(parts[i]) > 0 {
				k = keys[int(parts[i][0])%len(keys)]
			}
			list = append(list, remoting.ExtField{Key: k, Value: string(parts[i+1])})
		}
		mq := message.MessageQueue{Topic: "T", BrokerName: "b", QueueID: 1}
		forms := map[string]func() *remoting.RemotingCommand{
			"list": func() *remoting.RemotingCommand {
				r := remoting.NewResponse(codes[int(code)%len(codes)], "")
				r.ExtList = append([]remoting.ExtField{}, list...)
				return r
			},
		}
		forms["map"] = func() *remoting.RemotingCommand { r := forms["list"](); r.ExtMap(); return r }
		forms["both"] = func() *remoting.RemotingCommand {
			r := forms["list"]()
			if len(list) > 0 {
				r.ExtFields = map[string]string{list[0].Key: list[len(list)-1].Value}
			}
			return r
		}
		for name, resp := range forms {
			got, err := ParseSendResponse(resp(), mq, "UNIQ")
			want, werr := parseSendResponseRef(resp(), mq, "UNIQ")
			if (err == nil) != (werr == nil) || err != nil && (err.Error() != werr.Error() || reflect.TypeOf(err) != reflect.TypeOf(werr)) {
				t.Fatalf("%s %q: error %v, reference %v", name, list, err, werr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s %q:\n got %+v\nwant %+v", name, list, got, want)
			}
		}
	})
}
