package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/message"
)

// Perm bits of a topic, a queue data or a broker (Java PermName, docs/protocol.md §6.4). A
// typical topic has perm 6 (read|write); TBW102 has 7 (inherit|read|write).
const (
	PermInherit  = 1 // PERM_INHERIT: new topics may be auto-created from this one (TBW102)
	PermWrite    = 2 // PERM_WRITE: producers may send to the queues
	PermRead     = 4 // PERM_READ: consumers may pull from the queues
	PermPriority = 8 // PERM_PRIORITY
)

// MasterID is the broker id of a master in BrokerData.BrokerAddrs (Java
// MixAll.MASTER_ID); slaves have ids ≥ 1. Only a master's registration creates or
// updates a topic's QueueData.
const MasterID int64 = 0

// MaxQueueNums bounds readQueueNums, writeQueueNums and orderTopicConf counts accepted
// from a route (65536), so a hostile or broken route cannot make a client allocate
// without limit. Real topics have at most a few hundred queues per broker.
const MaxQueueNums = 1 << 16

// TopicRouteData is the body of a successful GET_ROUTEINFO_BY_TOPIC (RocketMQ request
// code 105) response (Java TopicRouteData, docs/protocol.md §3.1): which brokers hold the
// topic and how many queues each has. Marshal writes queueDatas, brokerDatas and
// filterServerTable always, as [] and {} when empty (the official Go client slices the
// raw text and needs them).
type TopicRouteData struct {
	// OrderTopicConf is "brokerName:queueNums;brokerName2:n" for ordered topics, from
	// the name server's KV namespace ORDER_TOPIC_CONFIG; "" (and left out of the JSON)
	// otherwise. When set, producers build their queue list only from it.
	OrderTopicConf string `json:"orderTopicConf,omitempty"`
	// QueueDatas holds one entry per broker name serving the topic (a Sluice name
	// server sorts them by broker name).
	QueueDatas []QueueData `json:"queueDatas"`
	// BrokerDatas holds one entry per broker name in QueueDatas: its master (id 0) and
	// slaves.
	BrokerDatas []BrokerData `json:"brokerDatas"`
	// FilterServerTable maps a broker address to its filter servers; usually empty and
	// unused by Sluice.
	FilterServerTable map[string][]string `json:"filterServerTable"`
}

// MarshalJSON writes nil slices and maps as [] and {}.
func (r TopicRouteData) MarshalJSON() ([]byte, error) {
	type plain TopicRouteData
	if r.QueueDatas == nil {
		r.QueueDatas = []QueueData{}
	}
	if r.BrokerDatas == nil {
		r.BrokerDatas = []BrokerData{}
	}
	if r.FilterServerTable == nil {
		r.FilterServerTable = map[string][]string{}
	}
	return json.Marshal(plain(r))
}

// QueueData is one broker's queues of a topic in a route (Java QueueData).
//
// JSON: brokerName, readQueueNums, writeQueueNums, perm, topicSysFlag — and the same
// flag once more as topicSynFlag, the spelling of RocketMQ ≤ 4.5 that the official Go
// client still reads (docs/protocol.md §3.1). Marshal always writes both keys; Unmarshal
// accepts either (topicSysFlag wins when both are present).
type QueueData struct {
	BrokerName     string // broker holding these queues
	ReadQueueNums  int    // queues 0..n-1 consumers read
	WriteQueueNums int    // queues 0..n-1 producers write
	Perm           int    // Perm* bits
	TopicSysFlag   int    // bit0 unit topic, bit1 unit-sub
}

type queueDataJSON struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int    `json:"readQueueNums"`
	WriteQueueNums int    `json:"writeQueueNums"`
	Perm           int    `json:"perm"`
	TopicSysFlag   *int   `json:"topicSysFlag,omitempty"`
	TopicSynFlag   *int   `json:"topicSynFlag,omitempty"`
}

// MarshalJSON writes the Java field names plus the legacy topicSynFlag key.
func (q QueueData) MarshalJSON() ([]byte, error) {
	f := q.TopicSysFlag
	return json.Marshal(queueDataJSON{
		BrokerName: q.BrokerName, ReadQueueNums: q.ReadQueueNums, WriteQueueNums: q.WriteQueueNums,
		Perm: q.Perm, TopicSysFlag: &f, TopicSynFlag: &f,
	})
}

// UnmarshalJSON reads either spelling of the sys flag.
func (q *QueueData) UnmarshalJSON(b []byte) error {
	var j queueDataJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*q = QueueData{BrokerName: j.BrokerName, ReadQueueNums: j.ReadQueueNums, WriteQueueNums: j.WriteQueueNums, Perm: j.Perm}
	switch {
	case j.TopicSysFlag != nil:
		q.TopicSysFlag = *j.TopicSysFlag
	case j.TopicSynFlag != nil:
		q.TopicSysFlag = *j.TopicSynFlag
	}
	return nil
}

// BrokerData is one broker name (a master and its slaves) in a route or cluster info
// (Java BrokerData). BrokerAddrs maps broker id → "ip:port"; id 0 ([MasterID]) is the
// master. It is always written, as an object with quoted keys ({"0":"127.0.0.1:10911"}),
// never omitted: the official Go client slices its raw text and panics if it is missing.
type BrokerData struct {
	Cluster     string           `json:"cluster"`     // cluster name, e.g. "DefaultCluster"
	BrokerName  string           `json:"brokerName"`  // broker name, e.g. "broker-a"
	BrokerAddrs map[int64]string `json:"brokerAddrs"` // broker id → "ip:port"
}

// MasterAddr returns the master's address (broker id 0), or "" if the broker has none.
func (b BrokerData) MasterAddr() string { return b.BrokerAddrs[MasterID] }

// MarshalJSON writes brokerAddrs as {} when the map is nil.
func (b BrokerData) MarshalJSON() ([]byte, error) {
	type plain BrokerData
	if b.BrokerAddrs == nil {
		b.BrokerAddrs = map[int64]string{}
	}
	return json.Marshal(plain(b))
}

// Clone returns a deep copy of b.
func (b BrokerData) Clone() BrokerData {
	c := BrokerData{Cluster: b.Cluster, BrokerName: b.BrokerName, BrokerAddrs: make(map[int64]string, len(b.BrokerAddrs))}
	for id, a := range b.BrokerAddrs {
		c.BrokerAddrs[id] = a
	}
	return c
}

// ErrBadRouteData is wrapped by every error [ParseTopicRouteData] returns (through a
// [*RouteError]).
var ErrBadRouteData = errors.New("wire: bad topic route data")

// RouteError reports a route body that cannot be used. errors.Is(err, ErrBadRouteData)
// is true for every RouteError.
type RouteError struct {
	Topic  string // the topic whose route was asked for
	Reason string // what is wrong with the body
	Err    error  // the JSON decoding error, if any
}

// Error implements error.
func (e *RouteError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("wire: route of topic %q: %s: %v", e.Topic, e.Reason, e.Err)
	}
	return fmt.Sprintf("wire: route of topic %q: %s", e.Topic, e.Reason)
}

// Unwrap returns the decoding error, if any.
func (e *RouteError) Unwrap() error { return e.Err }

// Is reports target == ErrBadRouteData.
func (e *RouteError) Is(target error) bool { return target == ErrBadRouteData }

// ParseTopicRouteData decodes a GET_ROUTEINFO_BY_TOPIC (RocketMQ request code 105)
// response body for topic (used only in errors). It accepts strict JSON
// ({"0":"ip:port"}) and the fastjson dialect of Java name servers answering clients
// older than 4.9.4, whose numeric map keys are unquoted ({0:"ip:port"}, docs/protocol.md
// §3.1). A missing brokerDatas or filterServerTable, and a missing brokerAddrs, give
// an empty slice or map. It returns a [*RouteError] (wrapping [ErrBadRouteData]) when
// the body is empty, is not JSON after quoting bare numeric keys, has no queueDatas
// array (every name server writes one), holds a null queue or broker entry, or has
// queue counts outside 0..[MaxQueueNums].
func ParseTopicRouteData(topic string, body []byte) (*TopicRouteData, error) {
	if len(body) == 0 {
		return nil, &RouteError{Topic: topic, Reason: "empty route body"}
	}
	var raw struct {
		OrderTopicConf    string              `json:"orderTopicConf"`
		QueueDatas        []*QueueData        `json:"queueDatas"`
		BrokerDatas       []*BrokerData       `json:"brokerDatas"`
		FilterServerTable map[string][]string `json:"filterServerTable"`
	}
	if err := json.Unmarshal(QuoteNumericKeys(body), &raw); err != nil {
		return nil, &RouteError{Topic: topic, Reason: "route body is not route JSON", Err: err}
	}
	if raw.QueueDatas == nil {
		return nil, &RouteError{Topic: topic, Reason: "route body has no queueDatas"}
	}
	rd := &TopicRouteData{
		OrderTopicConf:    raw.OrderTopicConf,
		QueueDatas:        make([]QueueData, len(raw.QueueDatas)),
		BrokerDatas:       make([]BrokerData, len(raw.BrokerDatas)),
		FilterServerTable: raw.FilterServerTable,
	}
	if rd.FilterServerTable == nil {
		rd.FilterServerTable = map[string][]string{}
	}
	for i, q := range raw.QueueDatas {
		if q == nil {
			return nil, &RouteError{Topic: topic, Reason: fmt.Sprintf("queueDatas[%d] is null", i)}
		}
		if q.ReadQueueNums < 0 || q.ReadQueueNums > MaxQueueNums || q.WriteQueueNums < 0 || q.WriteQueueNums > MaxQueueNums {
			return nil, &RouteError{Topic: topic, Reason: fmt.Sprintf("broker %q has %d read / %d write queues; allowed 0..%d",
				q.BrokerName, q.ReadQueueNums, q.WriteQueueNums, MaxQueueNums)}
		}
		rd.QueueDatas[i] = *q
	}
	for i, b := range raw.BrokerDatas {
		if b == nil {
			return nil, &RouteError{Topic: topic, Reason: fmt.Sprintf("brokerDatas[%d] is null", i)}
		}
		if b.BrokerAddrs == nil {
			b.BrokerAddrs = map[int64]string{}
		}
		rd.BrokerDatas[i] = *b
	}
	return rd, nil
}

// QuoteNumericKeys rewrites JSON text so that object keys written as bare integers
// (fastjson's Map<Long,String> output {0:"a",1:"b"}) become strings ({"0":"a","1":"b"})
// that encoding/json decodes into integer-keyed maps. Strict JSON is returned unchanged
// without copying. The rewrite only touches text outside string literals that directly
// follows '{' or ',' (after white space) and is followed by ':'; encoding/json
// validates everything else.
func QuoteNumericKeys(b []byte) []byte {
	var out []byte // allocated on the first change
	inStr, esc := false, false
	expectKey := false
	last := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
			expectKey = false
		case '{', ',':
			expectKey = true
		case ' ', '\t', '\n', '\r':
		default:
			if expectKey && (c == '-' || c >= '0' && c <= '9') {
				j := i + 1
				for j < len(b) && b[j] >= '0' && b[j] <= '9' {
					j++
				}
				k := j
				for k < len(b) && (b[k] == ' ' || b[k] == '\t' || b[k] == '\n' || b[k] == '\r') {
					k++
				}
				if k < len(b) && b[k] == ':' {
					if out == nil {
						out = make([]byte, 0, len(b)+16)
					}
					out = append(out, b[last:i]...)
					out = append(out, '"')
					out = append(out, b[i:j]...)
					out = append(out, '"')
					last = j
					i = j - 1
				}
			}
			expectKey = false
		}
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// Clone returns a deep copy of rd.
func (rd *TopicRouteData) Clone() *TopicRouteData {
	c := &TopicRouteData{OrderTopicConf: rd.OrderTopicConf}
	c.QueueDatas = append([]QueueData(nil), rd.QueueDatas...)
	for _, b := range rd.BrokerDatas {
		c.BrokerDatas = append(c.BrokerDatas, b.Clone())
	}
	if rd.FilterServerTable != nil {
		c.FilterServerTable = make(map[string][]string, len(rd.FilterServerTable))
		for k, v := range rd.FilterServerTable {
			c.FilterServerTable[k] = append([]string(nil), v...)
		}
	}
	return c
}

// Broker returns the route's BrokerData for brokerName and whether there is one.
func (rd *TopicRouteData) Broker(brokerName string) (BrokerData, bool) {
	for _, b := range rd.BrokerDatas {
		if b.BrokerName == brokerName {
			return b, true
		}
	}
	return BrokerData{}, false
}

// CapQueueNums returns a copy of rd with every queue data's read and write queue counts
// capped at n. Producers use it on the TBW102 route when a topic does not exist yet
// (defaultTopicQueueNums = 4, docs/protocol.md §7.2).
func (rd *TopicRouteData) CapQueueNums(n int) *TopicRouteData {
	c := rd.Clone()
	for i := range c.QueueDatas {
		c.QueueDatas[i].ReadQueueNums = min(c.QueueDatas[i].ReadQueueNums, n)
		c.QueueDatas[i].WriteQueueNums = min(c.QueueDatas[i].WriteQueueNums, n)
	}
	return c
}

// PublishQueues returns the message queues producers may send topic to (docs/protocol.md §7.2):
// with orderTopicConf set, queues 0..n-1 of each listed broker in listed order; otherwise,
// for the queue datas with PermWrite whose broker has a master (id 0), sorted by broker
// name, queues 0..writeQueueNums-1. A bad orderTopicConf is an error wrapping
// [ErrBadOrderTopicConf].
func PublishQueues(topic string, rd *TopicRouteData) ([]message.MessageQueue, error) {
	var out []message.MessageQueue
	if rd.OrderTopicConf != "" {
		entries, err := ParseOrderTopicConf(rd.OrderTopicConf)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			for q := 0; q < e.QueueNums; q++ {
				out = append(out, message.MessageQueue{Topic: topic, BrokerName: e.BrokerName, QueueID: q})
			}
		}
		return out, nil
	}
	qds := append([]QueueData(nil), rd.QueueDatas...)
	sort.SliceStable(qds, func(i, j int) bool { return qds[i].BrokerName < qds[j].BrokerName })
	for _, qd := range qds {
		if qd.Perm&PermWrite == 0 {
			continue
		}
		b, ok := rd.Broker(qd.BrokerName)
		if !ok || b.MasterAddr() == "" {
			continue
		}
		for q := 0; q < qd.WriteQueueNums; q++ {
			out = append(out, message.MessageQueue{Topic: topic, BrokerName: qd.BrokerName, QueueID: q})
		}
	}
	return out, nil
}

// SubscribeQueues returns the message queues consumers read topic from: for the queue
// datas with PermRead, queues 0..readQueueNums-1, sorted by broker name then queue id
// (docs/protocol.md §6.4, §7.3).
func SubscribeQueues(topic string, rd *TopicRouteData) []message.MessageQueue {
	var out []message.MessageQueue
	for _, qd := range rd.QueueDatas {
		if qd.Perm&PermRead == 0 {
			continue
		}
		for q := 0; q < qd.ReadQueueNums; q++ {
			out = append(out, message.MessageQueue{Topic: topic, BrokerName: qd.BrokerName, QueueID: q})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// ErrBadOrderTopicConf is wrapped by [ParseOrderTopicConf] (and so by [PublishQueues])
// for an orderTopicConf string it cannot read.
var ErrBadOrderTopicConf = errors.New("wire: bad orderTopicConf")

// OrderTopicEntry is one "brokerName:queueNums" item of an orderTopicConf string.
type OrderTopicEntry struct {
	BrokerName string
	QueueNums  int
}

// ParseOrderTopicConf parses an orderTopicConf string "brokerName:n;brokerName2:m" into
// (broker name, write queue count) pairs in the given order, as the Java client reads
// it: empty items (a trailing ";") are skipped and a count may be 0. An empty string
// gives an empty result. An item without ":", with an empty broker name, or with a
// count that is not a decimal int in 0..[MaxQueueNums] is an error wrapping
// [ErrBadOrderTopicConf] that names the item. [FormatOrderTopicConf] writes the
// canonical form; a name server storing the value checks against it.
func ParseOrderTopicConf(s string) ([]OrderTopicEntry, error) {
	if s == "" {
		return nil, nil
	}
	out := make([]OrderTopicEntry, 0, strings.Count(s, ";")+1)
	for part := range strings.SplitSeq(s, ";") {
		if part == "" {
			continue
		}
		name, num, ok := strings.Cut(part, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: entry %q: want brokerName:queueNums", ErrBadOrderTopicConf, part)
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 || n > MaxQueueNums {
			return nil, fmt.Errorf("%w: entry %q: queue count must be an int in 0..%d", ErrBadOrderTopicConf, part, MaxQueueNums)
		}
		out = append(out, OrderTopicEntry{BrokerName: name, QueueNums: n})
	}
	return out, nil
}

// FormatOrderTopicConf is the inverse of [ParseOrderTopicConf]:
// "brokerName:n;brokerName2:m".
func FormatOrderTopicConf(entries []OrderTopicEntry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(e.BrokerName)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.QueueNums))
	}
	return b.String()
}
