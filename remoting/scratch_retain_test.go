package remoting

import (
	"encoding/binary"
	"strings"
	"testing"
)

// TestReadLoopScratchKeepsNoHeader: readLoop decodes each frame's ext fields into a
// per-connection scratch array and releases it after the frame, so that it keeps no
// header alive. When the fast JSON path appends entries and then gives up (here at a
// null value) and encoding/json decodes the header instead (deduplicating the repeated
// keys), the fast path's extra entries lie beyond what the decode returned: clearing
// only those returned left them aliasing the header for as long as the connection lived.
func TestReadLoopScratchKeepsNoHeader(t *testing.T) {
	var ext strings.Builder
	ext.WriteString(`{"code":310,"flag":0,"extFields":{`)
	big := strings.Repeat("x", 2<<10) // 20 fields of 2 KiB: under the 64 KiB fallback limit
	for i := 0; i < 20; i++ {
		ext.WriteString(`"k":"` + big + `",`) // one key, repeated
	}
	ext.WriteString(`"z":null}}`)
	h := []byte(ext.String())
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(h)))
	frame = append(frame, h...)

	var scratch [32]ExtField // as in readLoop
	cmd, _, got, hasExt, err := decodeFrameExt(frame, scratch[:0])
	if err != nil || cmd == nil || !hasExt {
		t.Fatalf("decode: %v", err)
	}
	releaseScratch(&scratch) // as readLoop does after setExt
	kept := 0
	for _, f := range scratch {
		kept += len(f.Key) + len(f.Value)
	}
	if kept != 0 {
		t.Fatalf("after the frame, the scratch array still references %d bytes of its header (%d entries decoded)", kept, len(got))
	}
}
