package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/message"
)

// Topic permission bits of QueueData.perm (Java PermName; PROTOCOL §6.4).
const (
	PermPriority = 8 // PRIORITY
	PermRead     = 4 // READ: consumers may pull
	PermWrite    = 2 // WRITE: producers may send
	PermInherit  = 1 // INHERIT: new topics may be auto-created from this one (TBW102)
)

// MaxQueueNums bounds readQueueNums, writeQueueNums and orderTopicConf counts accepted
// from a name server (65536), so a hostile or broken route cannot make the client
// allocate without limit. Real topics have at most a few hundred queues per broker.
const MaxQueueNums = 1 << 16

// MasterID is the broker id of a master in BrokerData.brokerAddrs; slaves have ids >= 1.
const MasterID int64 = 0

// TopicRouteData is the route of a topic as a name server returns it for
// GET_ROUTEINFO_BY_TOPIC (RocketMQ request code 105; PROTOCOL §3.1): which brokers hold
// the topic and how many queues each has.
type TopicRouteData struct {
	// OrderTopicConf is "brokerName:queueNums;brokerName2:n" for ordered topics, "" otherwise.
	// When set, producers build their queue list only from it.
	OrderTopicConf string `json:"orderTopicConf,omitempty"`
	// QueueDatas lists, per broker name, the topic's queue counts and permission.
	QueueDatas []QueueData `json:"queueDatas"`
	// BrokerDatas lists, per broker name, the addresses of its master (id 0) and slaves.
	BrokerDatas []BrokerData `json:"brokerDatas"`
	// FilterServerTable maps a broker address to its filter servers (unused by Sluice).
	FilterServerTable map[string][]string `json:"filterServerTable,omitempty"`
}

// QueueData is one broker's share of a topic (Java QueueData).
type QueueData struct {
	BrokerName     string `json:"brokerName"`     // broker holding these queues
	ReadQueueNums  int    `json:"readQueueNums"`  // queues 0..n-1 consumers read
	WriteQueueNums int    `json:"writeQueueNums"` // queues 0..n-1 producers write
	Perm           int    `json:"perm"`           // PermRead | PermWrite | ...
	// TopicSysFlag is spelled topicSysFlag by 4.9.x name servers and topicSynFlag by
	// 4.5.x and older; both are read.
	TopicSysFlag int `json:"topicSysFlag"`
}

// UnmarshalJSON reads a QueueData accepting both spellings of the sys flag field.
func (q *QueueData) UnmarshalJSON(b []byte) error {
	var raw struct {
		BrokerName     string `json:"brokerName"`
		ReadQueueNums  int    `json:"readQueueNums"`
		WriteQueueNums int    `json:"writeQueueNums"`
		Perm           int    `json:"perm"`
		TopicSysFlag   *int   `json:"topicSysFlag"`
		TopicSynFlag   *int   `json:"topicSynFlag"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*q = QueueData{BrokerName: raw.BrokerName, ReadQueueNums: raw.ReadQueueNums, WriteQueueNums: raw.WriteQueueNums, Perm: raw.Perm}
	switch {
	case raw.TopicSysFlag != nil:
		q.TopicSysFlag = *raw.TopicSysFlag
	case raw.TopicSynFlag != nil:
		q.TopicSysFlag = *raw.TopicSynFlag
	}
	return nil
}

// BrokerData names a broker (master plus slaves) and its addresses (Java BrokerData).
type BrokerData struct {
	Cluster    string `json:"cluster"`    // cluster name, e.g. "DefaultCluster"
	BrokerName string `json:"brokerName"` // broker name, e.g. "broker-a"
	// BrokerAddrs maps broker id (0 = master, >= 1 = slave) to "ip:port".
	BrokerAddrs map[int64]string `json:"brokerAddrs"`
}

// MasterAddr returns the master's address (broker id 0) and whether there is one.
func (b BrokerData) MasterAddr() (string, bool) {
	a, ok := b.BrokerAddrs[MasterID]
	return a, ok && a != ""
}

// RouteError reports a route body that cannot be used.
type RouteError struct {
	Topic  string // the topic whose route was asked for
	Reason string // what is wrong with the body
	Err    error  // the JSON decoding error, if any
}

// Error implements error.
func (e *RouteError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("client: route of topic %q: %s: %v", e.Topic, e.Reason, e.Err)
	}
	return fmt.Sprintf("client: route of topic %q: %s", e.Topic, e.Reason)
}

// Unwrap returns the underlying decode error, if any.
func (e *RouteError) Unwrap() error { return e.Err }

// ParseTopicRouteData decodes a GET_ROUTEINFO_BY_TOPIC response body (PROTOCOL §3.1). It
// accepts strict JSON and the fastjson dialect of Java name servers that writes numeric
// map keys unquoted ({0:"ip:port"}). It returns a *RouteError when the body is empty, is
// not JSON, lacks queueDatas, or has queue counts outside 0..MaxQueueNums.
func ParseTopicRouteData(topic string, body []byte) (*TopicRouteData, error) {
	if len(body) == 0 {
		return nil, &RouteError{Topic: topic, Reason: "empty route body"}
	}
	norm := QuoteNumericKeys(body)
	var probe struct {
		QueueDatas json.RawMessage `json:"queueDatas"`
	}
	if err := json.Unmarshal(norm, &probe); err != nil {
		return nil, &RouteError{Topic: topic, Reason: "route body is not JSON", Err: err}
	}
	if len(probe.QueueDatas) == 0 || string(probe.QueueDatas) == "null" {
		return nil, &RouteError{Topic: topic, Reason: "route body has no queueDatas"}
	}
	var rd TopicRouteData
	if err := json.Unmarshal(norm, &rd); err != nil {
		return nil, &RouteError{Topic: topic, Reason: "bad route JSON", Err: err}
	}
	for _, qd := range rd.QueueDatas {
		if qd.ReadQueueNums < 0 || qd.ReadQueueNums > MaxQueueNums || qd.WriteQueueNums < 0 || qd.WriteQueueNums > MaxQueueNums {
			return nil, &RouteError{Topic: topic, Reason: fmt.Sprintf("broker %q has %d read / %d write queues; allowed 0..%d",
				qd.BrokerName, qd.ReadQueueNums, qd.WriteQueueNums, MaxQueueNums)}
		}
	}
	return &rd, nil
}

// QuoteNumericKeys rewrites JSON text so that object keys written as bare integers
// (fastjson's {0:"a",1:"b"}) become strings ({"0":"a","1":"b"}). Strict JSON passes
// through unchanged. The rewrite only touches text outside string literals that directly
// follows '{' or ',' (after whitespace) and is followed by ':'.
func QuoteNumericKeys(b []byte) []byte {
	var out []byte // allocated on first change
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
		nb := BrokerData{Cluster: b.Cluster, BrokerName: b.BrokerName, BrokerAddrs: make(map[int64]string, len(b.BrokerAddrs))}
		for id, a := range b.BrokerAddrs {
			nb.BrokerAddrs[id] = a
		}
		c.BrokerDatas = append(c.BrokerDatas, nb)
	}
	if rd.FilterServerTable != nil {
		c.FilterServerTable = make(map[string][]string, len(rd.FilterServerTable))
		for k, v := range rd.FilterServerTable {
			c.FilterServerTable[k] = append([]string(nil), v...)
		}
	}
	return c
}

// Broker returns the BrokerData for brokerName.
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
// (defaultTopicQueueNums = 4, PROTOCOL §7.2).
func (rd *TopicRouteData) CapQueueNums(n int) *TopicRouteData {
	c := rd.Clone()
	for i := range c.QueueDatas {
		c.QueueDatas[i].ReadQueueNums = min(c.QueueDatas[i].ReadQueueNums, n)
		c.QueueDatas[i].WriteQueueNums = min(c.QueueDatas[i].WriteQueueNums, n)
	}
	return c
}

// ErrBadOrderTopicConf is wrapped by PublishQueues when orderTopicConf cannot be parsed.
var ErrBadOrderTopicConf = errors.New("client: bad orderTopicConf")

// PublishQueues returns the message queues producers may send topic to (PROTOCOL §7.2):
// with orderTopicConf set, queues 0..n-1 of each listed broker in listed order; otherwise,
// for the queue datas with PermWrite whose broker has a master (id 0), sorted by broker
// name, queues 0..writeQueueNums-1.
func PublishQueues(topic string, rd *TopicRouteData) ([]message.MessageQueue, error) {
	var out []message.MessageQueue
	if rd.OrderTopicConf != "" {
		for _, part := range strings.Split(rd.OrderTopicConf, ";") {
			if part == "" {
				continue
			}
			name, num, ok := strings.Cut(part, ":")
			n, err := strconv.Atoi(num)
			if !ok || err != nil || n < 0 || n > MaxQueueNums || name == "" {
				return nil, fmt.Errorf("%w: %q", ErrBadOrderTopicConf, rd.OrderTopicConf)
			}
			for q := 0; q < n; q++ {
				out = append(out, message.MessageQueue{Topic: topic, BrokerName: name, QueueID: q})
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
		if !ok {
			continue
		}
		if _, ok := b.MasterAddr(); !ok {
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
// (PROTOCOL §6.4, §7.3).
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
