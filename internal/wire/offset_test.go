package wire

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/remoting"
)

func TestConsumerOffsetHeader(t *testing.T) {
	h := ConsumerOffsetHeader{ConsumerGroup: "g", Topic: "T", QueueID: 3, CommitOffset: 41}
	if _, ok := h.Ext(false)["commitOffset"]; ok {
		t.Fatal("query header carries commitOffset")
	}
	got, err := ParseConsumerOffsetHeader(remoting.NewRequest(remoting.UpdateConsumerOffset, h.Ext(true), nil), true)
	if err != nil || got != h {
		t.Fatalf("update round trip = %+v %v", got, err)
	}
	got, err = ParseConsumerOffsetHeader(remoting.NewRequest(remoting.QueryConsumerOffset, h.Ext(false), nil), false)
	if err != nil || got != (ConsumerOffsetHeader{ConsumerGroup: "g", Topic: "T", QueueID: 3}) {
		t.Fatalf("query round trip = %+v %v", got, err)
	}
	var he *remoting.HeaderError
	if _, err := ParseConsumerOffsetHeader(remoting.NewRequest(remoting.UpdateConsumerOffset, h.Ext(false), nil), true); !errors.As(err, &he) || he.Field != "commitOffset" {
		t.Fatalf("update without commitOffset: %v", err)
	}
	h.CommitOffset = -1
	if _, err := ParseConsumerOffsetHeader(remoting.NewRequest(remoting.UpdateConsumerOffset, h.Ext(true), nil), true); !errors.As(err, &he) || he.Field != "commitOffset" {
		t.Fatalf("negative commitOffset: %v", err)
	}
	ext := h.Ext(false)
	delete(ext, "consumerGroup")
	if _, err := ParseConsumerOffsetHeader(remoting.NewRequest(remoting.QueryConsumerOffset, ext, nil), false); !errors.As(err, &he) || he.Field != "consumerGroup" {
		t.Fatalf("without consumerGroup: %v", err)
	}
}

func TestResetOffsetHeader(t *testing.T) {
	h := ResetOffsetHeader{Topic: "T", Group: "g", Timestamp: -1, IsForce: false}
	got, err := ParseResetOffsetHeader(remoting.NewRequest(remoting.InvokeBrokerToResetOffset, h.Ext(), nil))
	if err != nil || got != h {
		t.Fatalf("round trip = %+v %v", got, err)
	}
	ext := h.Ext()
	delete(ext, "isForce")
	if got, err := ParseResetOffsetHeader(remoting.NewRequest(remoting.InvokeBrokerToResetOffset, ext, nil)); err != nil || !got.IsForce {
		t.Fatalf("isForce absent = %+v %v, want true", got, err)
	}
	var he *remoting.HeaderError
	for field, value := range map[string]string{"timestamp": "-2", "isForce": "perhaps", "group": ""} {
		ext := h.Ext()
		if value == "" {
			delete(ext, field)
		} else {
			ext[field] = value
		}
		if _, err := ParseResetOffsetHeader(remoting.NewRequest(remoting.InvokeBrokerToResetOffset, ext, nil)); !errors.As(err, &he) || he.Field != field {
			t.Errorf("%s=%q: %v", field, value, err)
		}
	}
}

func TestQueueHeader(t *testing.T) {
	h := QueueHeader{Topic: "T", QueueID: 2, Timestamp: 1700000000000}
	if ext := h.Ext(false); len(ext) != 2 || ext["queueId"] != "2" {
		t.Fatalf("ext %v", ext)
	}
	got, err := ParseQueueHeader(remoting.NewRequest(remoting.SearchOffsetByTimestamp, h.Ext(true), nil), true)
	if err != nil || got != h {
		t.Fatalf("round trip = %+v %v", got, err)
	}
	var he *remoting.HeaderError
	if _, err := ParseQueueHeader(remoting.NewRequest(remoting.SearchOffsetByTimestamp, h.Ext(false), nil), true); !errors.As(err, &he) || he.Field != "timestamp" {
		t.Fatalf("search without timestamp: %v", err)
	}
	if _, err := ParseQueueHeader(remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": "T", "queueId": "x"}, nil), false); !errors.As(err, &he) || he.Field != "queueId" {
		t.Fatalf("bad queueId: %v", err)
	}
}
