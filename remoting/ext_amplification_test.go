package remoting

import (
	"encoding/binary"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestRepeatedExtKeyMemory: a header whose extFields repeat one key (legal JSON; the
// last value wins) must not cost much more memory to decode than the header itself;
// with more than MaxExtFields fields it is refused as soon as the limit is passed.
// Before ExtList, decoding a 4 MiB header of `"a":"",` repeated allocated about its
// own size (a map of 2 entries); decoding it must stay within 4 times the header size,
// in map form (DecodeFrame, and readLoop for every code not in ExtListCodes) and in
// list form (DecodeFrameExtList, and readLoop for SEND_MESSAGE(_V2) / batch requests,
// which the broker decodes before any access check).
func TestRepeatedExtKeyMemory(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"code":310,"flag":0,"extFields":{`)
	for sb.Len() < 4<<20 {
		sb.WriteString(`"a":"",`)
	}
	sb.WriteString(`"z":""}}`)
	h := sb.String()
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(h)))
	frame = append(frame, h...)
	limit := uint64(4 * len(h))
	for _, tc := range []struct {
		name   string
		decode func([]byte) (*RemotingCommand, SerializeType, error)
	}{{"map", DecodeFrame}, {"list", DecodeFrameExtList}} {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		cmd, _, err := tc.decode(frame)
		runtime.ReadMemStats(&m1)
		// Refused at MaxExtFields, naming the field and the limit.
		if he, ok := errors.AsType[*HeaderError](err); !ok || he.Field != "extFields" || !strings.Contains(he.Reason, "1024") {
			t.Fatalf("%s: decoding %d repeated ext fields: %v, want a HeaderError on extFields naming the limit", tc.name, len(h)/7, err)
		}
		if got := m1.TotalAlloc - m0.TotalAlloc; got > limit {
			t.Errorf("%s form: decoding a %d-byte header with one repeated ext key allocated %d bytes (limit %d)", tc.name, len(h), got, limit)
		}
		runtime.KeepAlive(cmd)
	}
}

// TestExtFieldLimits: MaxExtFields fields are taken in JSON (fast path) and binary
// headers, one more is refused with a HeaderError on extFields; a JSON header that needs
// the general decoder (a null value) is taken up to 64 KiB and refused above.
func TestExtFieldLimits(t *testing.T) {
	for _, n := range []int{MaxExtFields, MaxExtFields + 1} {
		ext := make(map[string]string, n)
		for i := range n {
			ext["k"+strconv.Itoa(i)] = "v"
		}
		for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
			frame, err := NewRequest(RequestCode(310), ext, nil).EncodeAs(st)
			if err != nil {
				t.Fatal(err)
			}
			for name, decode := range map[string]func([]byte) (*RemotingCommand, SerializeType, error){"map": DecodeFrame, "list": DecodeFrameExtList} {
				cmd, _, err := decode(frame[4:])
				if n <= MaxExtFields {
					if err != nil || len(cmd.ExtMap()) != n {
						t.Fatalf("%v %s: %d fields: %v", st, name, n, err)
					}
					continue
				}
				if he, ok := errors.AsType[*HeaderError](err); !ok || he.Field != "extFields" {
					t.Fatalf("%v %s: %d fields: %v, want a HeaderError on extFields", st, name, n, err)
				}
			}
		}
	}
	for _, size := range []int{maxFallbackHeader - 1024, maxFallbackHeader + 1024} {
		h := `{"code":310,"flag":0,"remark":"` + strings.Repeat("r", size) + `","extFields":{"a":"1","z":null}}`
		frame := binary.BigEndian.AppendUint32(nil, uint32(len(h)))
		frame = append(frame, h...)
		cmd, _, err := DecodeFrame(frame)
		if size < maxFallbackHeader {
			if err != nil || cmd.ExtFields["a"] != "1" {
				t.Fatalf("%d-byte header with a null value: %v", len(h), err)
			}
			continue
		}
		if he, ok := errors.AsType[*HeaderError](err); !ok || he.Field != "header" {
			t.Fatalf("%d-byte header with a null value: %v, want a HeaderError on header", len(h), err)
		}
	}
}

// TestRecycledFrameFitsItsFrame: a recycled buffer goes to a frame of its own size class,
// so a 1.1 KiB frame never sits in a 64 KiB buffer (the outgoing queue's byte limits
// count frame lengths, not capacities).
func TestRecycledFrameFitsItsFrame(t *testing.T) {
	for range 100 {
		recycleFrame(make([]byte, 0, maxPooledFrame))
	}
	for range 100 {
		for _, whole := range []bool{false, true} {
			if b := frameBuf(1100, whole); cap(b) > 4*1100 {
				t.Fatalf("frameBuf(1100, %v) returned a buffer of capacity %d", whole, cap(b))
			}
		}
	}
}
