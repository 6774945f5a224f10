package broker

import (
	"encoding/json"
	"fmt"

	"github.com/sluicemq/sluice/remoting"
)

// The answers every handler builds. Answers particular to one concern stay with it
// (sendResponse and putResponse in send.go, pullResponse in pull.go).

// okResponse is the SUCCESS answer without a remark.
func okResponse() *remoting.RemotingCommand {
	return remoting.NewResponse(remoting.Success, "")
}

// jsonResponse is the SUCCESS answer whose body is v encoded as JSON. v is a wire body
// type (maps, slices, strings and numbers), which always encodes.
func jsonResponse(v any) *remoting.RemotingCommand {
	r := okResponse()
	r.Body, _ = json.Marshal(v)
	return r
}

// errResponse builds an error response with a formatted remark.
func errResponse(code remoting.ResponseCode, format string, args ...any) *remoting.RemotingCommand {
	return remoting.NewResponse(code, fmt.Sprintf(format, args...))
}
