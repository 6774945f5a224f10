package namesrv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrBadRouteData is wrapped by every error [ParseTopicRouteData] returns.
var ErrBadRouteData = errors.New("namesrv: bad topic route data")

// maxJSONDepth bounds the nesting the key-quoting scanner accepts; route JSON is 4 deep.
const maxJSONDepth = 64

// ParseTopicRouteData decodes a GET_ROUTEINFO_BY_TOPIC (RocketMQ request code 105)
// response body. It accepts strict JSON ({"0":"ip:port"}) and the fastjson dialect of
// Java name servers answering clients older than 4.9.4, whose numeric map keys are
// unquoted ({0:"ip:port"}, PROTOCOL.md §3.1). Missing queueDatas/brokerDatas/filterServerTable
// give empty slices and maps. Errors wrap [ErrBadRouteData]: empty body, text that is not JSON
// after quoting bare numeric keys, nesting deeper than 64, or a broker address map
// key that is not an int64.
func ParseTopicRouteData(body []byte) (*TopicRouteData, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, fmt.Errorf("%w: empty body", ErrBadRouteData)
	}
	strict, err := quoteNumericKeys(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRouteData, err)
	}
	r := new(TopicRouteData)
	if err := json.Unmarshal(strict, r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRouteData, err)
	}
	if r.QueueDatas == nil {
		r.QueueDatas = []*QueueData{}
	}
	if r.BrokerDatas == nil {
		r.BrokerDatas = []*BrokerData{}
	}
	if r.FilterServerTable == nil {
		r.FilterServerTable = map[string][]string{}
	}
	for i, q := range r.QueueDatas {
		if q == nil {
			return nil, fmt.Errorf("%w: queueDatas[%d] is null", ErrBadRouteData, i)
		}
	}
	for i, b := range r.BrokerDatas {
		if b == nil {
			return nil, fmt.Errorf("%w: brokerDatas[%d] is null", ErrBadRouteData, i)
		}
		if b.BrokerAddrs == nil {
			b.BrokerAddrs = map[int64]string{}
		}
	}
	return r, nil
}

// quoteNumericKeys rewrites object keys that are bare numbers (fastjson's output for
// Map<Long,String>) as JSON strings and copies everything else unchanged, so that
// the result can be decoded by encoding/json. Strings are copied with their escapes.
// It checks bracket balance and depth only; encoding/json validates the rest.
func quoteNumericKeys(in []byte) ([]byte, error) {
	out := make([]byte, 0, len(in)+16)
	var stack []byte // '{' or '['
	expectKey := false
	for i := 0; i < len(in); {
		c := in[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(in) && in[j] != '"' {
				if in[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(in) {
				return nil, fmt.Errorf("unterminated string at byte %d", i)
			}
			out = append(out, in[i:j+1]...)
			i = j + 1
			expectKey = false
			continue
		case c == '{' || c == '[':
			if len(stack) >= maxJSONDepth {
				return nil, fmt.Errorf("nesting deeper than %d at byte %d", maxJSONDepth, i)
			}
			stack = append(stack, c)
			expectKey = c == '{'
		case c == '}' || c == ']':
			want := byte('{')
			if c == ']' {
				want = '['
			}
			if len(stack) == 0 || stack[len(stack)-1] != want {
				return nil, fmt.Errorf("unbalanced %q at byte %d", c, i)
			}
			stack = stack[:len(stack)-1]
			expectKey = false
		case c == ',':
			expectKey = len(stack) > 0 && stack[len(stack)-1] == '{'
		case c == ':':
			expectKey = false
		case expectKey && (c == '-' || (c >= '0' && c <= '9')):
			j := i + 1
			for j < len(in) && (in[j] >= '0' && in[j] <= '9') {
				j++
			}
			out = append(out, '"')
			out = append(out, in[i:j]...)
			out = append(out, '"')
			i = j
			expectKey = false
			continue
		}
		out = append(out, c)
		i++
	}
	if len(stack) != 0 {
		return nil, fmt.Errorf("unbalanced: %d unclosed brackets", len(stack))
	}
	return out, nil
}
