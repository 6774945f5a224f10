package message

import (
	"bytes"
	"errors"
	"testing"
)

// TestDecodeRecordsBombAndBadZlib: a body flagged compressed that is not zlib, or that
// inflates past the limit, decodes with a nil Body and DecodeErr, never the raw bytes.
func TestDecodeRecordsBombAndBadZlib(t *testing.T) {
	bomb, _ := Deflate(bytes.Repeat([]byte{0}, 2<<20), 9)
	for name, body := range map[string][]byte{"bad zlib": []byte("xx"), "bomb": bomb} {
		m := &MessageExt{Message: Message{Topic: "T", Body: body}, SysFlag: SysFlagCompressed}
		rec, err := EncodeRecord(m)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := DecodeRecord(rec, DecodeOptions{Decompress: true, MaxDecompressedSize: 1 << 20})
		if err != nil || out.Body != nil || !errors.Is(out.DecodeErr, ErrUndecodableBody) {
			t.Errorf("%s: body %d bytes, DecodeErr %v, err %v", name, len(out.Body), out.DecodeErr, err)
		}
	}
}
