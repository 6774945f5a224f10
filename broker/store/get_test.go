package store

import (
	"bytes"
	"testing"
)

// TestGetMessageAppend: GetMessageAppend returns what GetMessage does, in the caller's
// array when it is large enough (whatever it held before is overwritten from index 0),
// and in a grown one when it is not.
func TestGetMessageAppend(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	for i := range 10 {
		put(t, s, newMsg("T", 0, string(rune('a'+i))+"-body", "TagA"))
	}
	want, err := s.GetMessage("T", 0, 2, 5, 0, nil)
	if err != nil || want.MessageCount != 5 {
		t.Fatalf("GetMessage: %+v %v", want, err)
	}
	big := bytes.Repeat([]byte{0xEE}, 4096)
	got, err := s.GetMessageAppend(big[:100], "T", 0, 2, 5, 0, nil)
	if err != nil || got.MessageCount != 5 || got.NextBeginOffset != want.NextBeginOffset || !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("GetMessageAppend into a large buffer: %+v %v, want %+v", got, err, want)
	}
	if &got.Body[0] != &big[0] || !bytes.Equal(got.Records[4], want.Records[4]) {
		t.Fatal("the records are not in the caller's array, from its start")
	}
	small := make([]byte, 0, 8)
	got, err = s.GetMessageAppend(small, "T", 0, 2, 5, 0, nil)
	if err != nil || !bytes.Equal(got.Body, want.Body) || cap(got.Body) < len(want.Body) {
		t.Fatalf("GetMessageAppend into a small buffer: %+v %v", got, err)
	}
	// A status without records leaves Body nil, whatever the buffer.
	got, err = s.GetMessageAppend(big, "T", 0, 10, 5, 0, nil)
	if err != nil || got.Status != OffsetOverflowOne || got.Body != nil {
		t.Fatalf("GetMessageAppend at the end: %+v %v", got, err)
	}
}
