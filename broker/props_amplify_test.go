package broker

import (
	"encoding/binary"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestSendBatchSeparatorPropertiesDoNotAmplify: a producer's SEND_BATCH_MESSAGE whose
// items carry properties made of 32000 0x02 separators (legal: at most 32767 bytes, and
// the parser drops empty pieces, so each item ends up with one property) must not make
// the broker allocate memory out of proportion to the request. message.UnmarshalProperties
// sizes its map by counting separators (strings.Count(s, "\x02")+1), so each such item
// got a map with room for 32001 entries, about 2.5 MiB, all of a batch's maps alive
// together: a 4 MiB batch of 128 items allocated over 300 MiB, and any producer that can
// open a few connections could exhaust the broker's memory.
func TestSendBatchSeparatorPropertiesDoNotAmplify(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Amp", 1)
	props := "TAGS\x01A\x02" + strings.Repeat("\x02", 32000)
	var body []byte
	const items = 128
	for range items {
		total := 20 + 1 + 2 + len(props)
		body = binary.BigEndian.AppendUint32(body, uint32(total))
		body = binary.BigEndian.AppendUint32(body, 0) // MAGICCODE
		body = binary.BigEndian.AppendUint32(body, 0) // BODYCRC
		body = binary.BigEndian.AppendUint32(body, 0) // FLAG
		body = binary.BigEndian.AppendUint32(body, 1)
		body = append(body, 'x')
		body = binary.BigEndian.AppendUint16(body, uint16(len(props)))
		body = append(body, props...)
	}
	// SEND_MESSAGE_V2 short header names (a producerGroup, b topic, ... m batch), as the
	// official clients send batches.
	ext := map[string]string{"a": "pg", "b": "Amp", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": strconv.FormatInt(time.Now().UnixMilli(), 10),
		"h": "0", "i": "", "j": "0", "k": "false", "m": "true"}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp := invoke(t, c, b.Addr(), remoting.NewRequest(remoting.SendBatchMessage, ext, body))
	runtime.ReadMemStats(&after)
	if resp.ResponseCode() != remoting.Success {
		t.Fatalf("batch send: %d %s", resp.Code, resp.Remark)
	}
	// The request is len(body) bytes; client and broker copy it a few times (encode, frame,
	// records). 16 times the body leaves ample room for that.
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(16*len(body)); got > limit {
		t.Fatalf("a %d-byte batch of %d items allocated %d MiB in this process (limit %d MiB)", len(body), items, got>>20, limit>>20)
	}
}

// TestSendPropertiesOverLimitAfterBrokerAdditions: a message whose properties are at
// most 32767 bytes as sent, but go over once the broker adds its own (CLUSTER on every
// message; REAL_TOPIC and REAL_QID on a delayed one), is answered MESSAGE_ILLEGAL (13)
// with the limit in the remark, as Apache RocketMQ answers PROPERTIES_SIZE_EXCEEDED:
// not SYSTEM_ERROR, which producers retry. One that still fits after the additions is
// stored.
func TestSendPropertiesOverLimitAfterBrokerAdditions(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "PropsEdge", 1)
	send := func(props string) *remoting.RemotingCommand {
		ext := map[string]string{"a": "pg", "b": "PropsEdge", "c": "TBW102", "d": "4", "e": "0", "f": "0",
			"g": strconv.FormatInt(time.Now().UnixMilli(), 10), "h": "0", "i": props, "j": "0", "k": "false"}
		return invoke(t, c, b.Addr(), remoting.NewRequest(remoting.SendMessageV2, ext, []byte("x")))
	}
	// withLen returns properties of n bytes: the given ones, then a padding property.
	withLen := func(n int, props string) string {
		return props + "pad\x01" + strings.Repeat("p", n-len(props)-len("pad\x01"))
	}
	cluster := len(message.PropertyCluster) + 1 + len(b.cfg.BrokerClusterName) + 1
	for _, tc := range []struct {
		name  string
		props string
		ok    bool
	}{
		{"fits with CLUSTER", withLen(message.MaxPropertiesLength-cluster, ""), true},
		{"full as sent", withLen(message.MaxPropertiesLength, ""), false},
		{"over with CLUSTER", withLen(message.MaxPropertiesLength-cluster+1, ""), false},
		{"delayed, over with REAL_TOPIC", withLen(message.MaxPropertiesLength-cluster, "DELAY\x012\x02"), false},
	} {
		resp := send(tc.props)
		switch {
		case tc.ok && resp.ResponseCode() != remoting.Success:
			t.Errorf("%s: %d %s, want SUCCESS", tc.name, resp.Code, resp.Remark)
		case !tc.ok && (resp.ResponseCode() != remoting.MessageIllegal || !strings.Contains(resp.Remark, strconv.Itoa(message.MaxPropertiesLength))):
			t.Errorf("%s: %d %s, want MESSAGE_ILLEGAL naming the limit", tc.name, resp.Code, resp.Remark)
		}
	}
}
