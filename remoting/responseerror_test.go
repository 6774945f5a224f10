package remoting

import (
	"errors"
	"fmt"
	"testing"
)

// TestResponseErrFor: a non-success answer becomes the one *ResponseError with the
// request, the broker and its address; SUCCESS is no error; Retryable follows the code;
// the message names what is known.
func TestResponseErrFor(t *testing.T) {
	if err := NewResponse(Success, "").ResponseErrFor(SendMessageV2, "broker-a", "127.0.0.1:10911"); err != nil {
		t.Fatalf("SUCCESS: %v", err)
	}
	err := fmt.Errorf("wrapped: %w", NewResponse(TopicNotExist, "topic[T] not exist").ResponseErrFor(SendMessageV2, "broker-a", "127.0.0.1:10911"))
	var re *ResponseError
	if !errors.As(err, &re) || re.Code != TopicNotExist || re.Remark != "topic[T] not exist" || re.Request != SendMessageV2 ||
		re.Broker != "broker-a" || re.Addr != "127.0.0.1:10911" || !re.Retryable() {
		t.Fatalf("%v: %#v", err, re)
	}
	for _, c := range []struct {
		e    *ResponseError
		want string
	}{
		{re, "remoting: SEND_MESSAGE_V2 to broker-a (127.0.0.1:10911): response code 17 (TOPIC_NOT_EXIST): topic[T] not exist"},
		{&ResponseError{Code: MessageIllegal, Remark: "too big"}, "remoting: response code 13 (MESSAGE_ILLEGAL): too big"},
		{&ResponseError{Code: SystemError, Remark: "x", Request: PullMessage, Addr: "h:1"}, "remoting: PULL_MESSAGE to h:1: response code 1 (SYSTEM_ERROR): x"},
		{&ResponseError{Code: SystemError, Remark: "x", Request: PullMessage}, "remoting: PULL_MESSAGE refused: response code 1 (SYSTEM_ERROR): x"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
	if (&ResponseError{Code: MessageIllegal}).Retryable() {
		t.Error("13 MESSAGE_ILLEGAL is retryable")
	}
}
