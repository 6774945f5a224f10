package wire

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func TestEndTransactionHeader(t *testing.T) {
	h := EndTransactionHeader{ProducerGroup: "pg", TranStateTableOffset: 4, CommitLogOffset: 4096,
		CommitOrRollback: message.SysFlagTransactionCommit, FromTransactionCheck: true, MsgID: "U", TransactionID: "X", BrokerName: "b"}
	ext := h.Ext()
	if ext["commitOrRollback"] != "8" || ext["bname"] != "b" || ext["fromTransactionCheck"] != "true" {
		t.Fatalf("ext %v", ext)
	}
	got, err := ParseEndTransactionHeader(remoting.NewRequest(remoting.EndTransaction, ext, nil))
	if err != nil || got != h {
		t.Fatalf("round trip = %+v %v", got, err)
	}
	h.BrokerName = ""
	if _, ok := h.Ext()["bname"]; ok {
		t.Fatal("empty bname written")
	}
	for _, key := range []string{"producerGroup", "tranStateTableOffset", "commitLogOffset", "commitOrRollback"} {
		ext := h.Ext()
		delete(ext, key)
		var he *remoting.HeaderError
		if _, err := ParseEndTransactionHeader(remoting.NewRequest(remoting.EndTransaction, ext, nil)); !errors.As(err, &he) || he.Field != key {
			t.Errorf("without %s: %v", key, err)
		}
	}
}

func TestCheckTransactionStateHeader(t *testing.T) {
	h := CheckTransactionStateHeader{TranStateTableOffset: 1, CommitLogOffset: 2, MsgID: "U", TransactionID: "U", OffsetMsgID: "O"}
	got, err := ParseCheckTransactionStateHeader(remoting.NewRequest(remoting.CheckTransactionState, h.Ext(), nil))
	if err != nil || got != h {
		t.Fatalf("round trip = %+v %v", got, err)
	}
	ext := h.Ext()
	ext["commitLogOffset"] = "x"
	var he *remoting.HeaderError
	if _, err := ParseCheckTransactionStateHeader(remoting.NewRequest(remoting.CheckTransactionState, ext, nil)); !errors.As(err, &he) || he.Field != "commitLogOffset" {
		t.Fatalf("bad commitLogOffset: %v", err)
	}
}

func TestSendBackHeader(t *testing.T) {
	h := SendBackHeader{Offset: 77, Group: "g", DelayLevel: -1, OriginMsgID: "M", OriginTopic: "T", MaxReconsumeTimes: 16}
	got, err := ParseSendBackHeader(remoting.NewRequest(remoting.ConsumerSendMsgBack, h.Ext(), nil))
	if err != nil || got != h {
		t.Fatalf("round trip = %+v %v", got, err)
	}
	ext := h.Ext()
	delete(ext, "maxReconsumeTimes")
	if got, err := ParseSendBackHeader(remoting.NewRequest(remoting.ConsumerSendMsgBack, ext, nil)); err != nil || got.MaxReconsumeTimes != -1 {
		t.Fatalf("absent maxReconsumeTimes = %+v %v, want -1", got, err)
	}
	for key, value := range map[string]string{"offset": "", "group": "", "delayLevel": "x", "maxReconsumeTimes": "many"} {
		ext := h.Ext()
		if value == "" {
			delete(ext, key)
		} else {
			ext[key] = value
		}
		var he *remoting.HeaderError
		if _, err := ParseSendBackHeader(remoting.NewRequest(remoting.ConsumerSendMsgBack, ext, nil)); !errors.As(err, &he) || he.Field != key {
			t.Errorf("%s=%q: %v", key, value, err)
		}
	}
}
