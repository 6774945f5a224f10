package wire

import (
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/remoting"
)

// SendHeader is the custom header of SEND_MESSAGE (RocketMQ request code 10, Java
// SendMessageRequestHeader, long keys) and of SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE
// (310 and 320, Java SendMessageRequestHeaderV2, the one-letter keys a..n); docs/protocol.md
// §3.3. Each field's comment gives its V2 key; sendHeaderKeys lists both spellings.
type SendHeader struct {
	ProducerGroup         string // a: producer group
	Topic                 string // b: topic
	DefaultTopic          string // c: topic new topics inherit from (TBW102)
	DefaultTopicQueueNums int32  // d: queue count of an auto-created topic (4)
	QueueID               int32  // e: queue id; a broker picks one when < 0
	SysFlag               int32  // f: message sysFlag (bit0 compressed, 0x4 half message)
	BornTimestamp         int64  // g: unix ms
	Flag                  int32  // h: user flag
	Properties            string // i: encoded properties (message.MarshalProperties); optional
	ReconsumeTimes        int32  // j: reconsume count (retry-as-normal sends: count+1); optional
	UnitMode              bool   // k: always false in Sluice; optional
	// MaxReconsumeTimes (l) is the retry limit for %RETRY% topics. [ParseSendHeader]
	// gives -1 when the key is absent (the group's retryMaxTimes applies); [SendHeader.Ext]
	// always writes it.
	MaxReconsumeTimes int32
	Batch             bool   // m: true only for SEND_BATCH_MESSAGE (320); optional
	BrokerName        string // n: target broker name (4.9.8 field; older brokers ignore it); optional
}

// Indexes into sendHeaderKeys, one per [SendHeader] field.
const (
	sendKeyProducerGroup = iota
	sendKeyTopic
	sendKeyDefaultTopic
	sendKeyDefaultTopicQueueNums
	sendKeyQueueID
	sendKeySysFlag
	sendKeyBornTimestamp
	sendKeyFlag
	sendKeyProperties
	sendKeyReconsumeTimes
	sendKeyUnitMode
	sendKeyMaxReconsumeTimes
	sendKeyBatch
	sendKeyBrokerName
)

// SendHeaderFields is how many ext fields a send header has at most (one per
// [SendHeader] field): a caller's fixed array for [SendHeader.AppendExtList].
const SendHeaderFields = len(sendHeaderKeys)

// sendHeaderKeys lists, in [SendHeader] field order, the SEND_MESSAGE (10) key and the
// compact SEND_MESSAGE_V2 (310) key of each header field (Java
// SendMessageRequestHeaderV2.createSendMessageRequestHeaderV1/V2).
var sendHeaderKeys = [...][2]string{
	{"producerGroup", "a"}, {"topic", "b"}, {"defaultTopic", "c"}, {"defaultTopicQueueNums", "d"},
	{"queueId", "e"}, {"sysFlag", "f"}, {"bornTimestamp", "g"}, {"flag", "h"}, {"properties", "i"},
	{"reconsumeTimes", "j"}, {"unitMode", "k"}, {"maxReconsumeTimes", "l"}, {"batch", "m"},
	{"brokerName", "n"},
}

func v2Key(i int) string { return sendHeaderKeys[i][1] }

// Ext returns the header as SEND_MESSAGE_V2 ext fields (keys a..n), every value a
// string; i (properties) and n (broker name) are left out when empty.
func (h SendHeader) Ext() map[string]string {
	ext := make(map[string]string, len(sendHeaderKeys))
	ext[v2Key(sendKeyProducerGroup)] = h.ProducerGroup
	ext[v2Key(sendKeyTopic)] = h.Topic
	ext[v2Key(sendKeyDefaultTopic)] = h.DefaultTopic
	ext[v2Key(sendKeyDefaultTopicQueueNums)] = strconv.FormatInt(int64(h.DefaultTopicQueueNums), 10)
	ext[v2Key(sendKeyQueueID)] = strconv.FormatInt(int64(h.QueueID), 10)
	ext[v2Key(sendKeySysFlag)] = strconv.FormatInt(int64(h.SysFlag), 10)
	ext[v2Key(sendKeyBornTimestamp)] = strconv.FormatInt(h.BornTimestamp, 10)
	ext[v2Key(sendKeyFlag)] = strconv.FormatInt(int64(h.Flag), 10)
	ext[v2Key(sendKeyReconsumeTimes)] = strconv.FormatInt(int64(h.ReconsumeTimes), 10)
	ext[v2Key(sendKeyUnitMode)] = strconv.FormatBool(h.UnitMode)
	ext[v2Key(sendKeyMaxReconsumeTimes)] = strconv.FormatInt(int64(h.MaxReconsumeTimes), 10)
	ext[v2Key(sendKeyBatch)] = strconv.FormatBool(h.Batch)
	if h.Properties != "" {
		ext[v2Key(sendKeyProperties)] = h.Properties
	}
	if h.BrokerName != "" {
		ext[v2Key(sendKeyBrokerName)] = h.BrokerName
	}
	return ext
}

// ExtList returns the header as SEND_MESSAGE_V2 ext fields in key order a..n, the same
// fields and values as [SendHeader.Ext], for a request in list form
// (remoting.RemotingCommand.ExtList): building it costs one slice and no map.
func (h SendHeader) ExtList() []remoting.ExtField {
	return h.AppendExtList(make([]remoting.ExtField, 0, len(sendHeaderKeys)))
}

// AppendExtList appends the fields of [SendHeader.ExtList] to dst and returns the
// extended slice: a caller that keeps a slice of len(sendHeaderKeys) free entries
// builds the list without allocating one (the numbers still become strings).
func (h SendHeader) AppendExtList(dst []remoting.ExtField) []remoting.ExtField {
	add := func(i int, v string) { dst = append(dst, remoting.ExtField{Key: v2Key(i), Value: v}) }
	add(sendKeyProducerGroup, h.ProducerGroup)
	add(sendKeyTopic, h.Topic)
	add(sendKeyDefaultTopic, h.DefaultTopic)
	add(sendKeyDefaultTopicQueueNums, itoa(int64(h.DefaultTopicQueueNums)))
	add(sendKeyQueueID, itoa(int64(h.QueueID)))
	add(sendKeySysFlag, itoa(int64(h.SysFlag)))
	add(sendKeyBornTimestamp, itoa(h.BornTimestamp))
	add(sendKeyFlag, itoa(int64(h.Flag)))
	if h.Properties != "" {
		add(sendKeyProperties, h.Properties)
	}
	add(sendKeyReconsumeTimes, itoa(int64(h.ReconsumeTimes)))
	add(sendKeyUnitMode, strconv.FormatBool(h.UnitMode))
	add(sendKeyMaxReconsumeTimes, itoa(int64(h.MaxReconsumeTimes)))
	add(sendKeyBatch, strconv.FormatBool(h.Batch))
	if h.BrokerName != "" {
		add(sendKeyBrokerName, h.BrokerName)
	}
	return dst
}

// itoa is strconv.FormatInt(v, 10) without allocating for -1 (MaxReconsumeTimes' "not
// set", in every send header); strconv already returns 0..99 without allocating.
func itoa(v int64) string {
	if v == -1 {
		return "-1"
	}
	return strconv.FormatInt(v, 10)
}

// ParseSendHeader reads the send header of req: the long keys of SEND_MESSAGE (10)
// when v2 is false, the one-letter keys of SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE
// (310 / 320) when true. producerGroup, topic, defaultTopic, defaultTopicQueueNums,
// queueId, sysFlag, bornTimestamp and flag are required; MaxReconsumeTimes is -1 when
// absent. A request in list form (ExtList, as the broker receives SEND_MESSAGE_V2) is
// read in one pass, with no map; the result and errors are the same as from the map.
// Errors: a [*remoting.HeaderError] naming the first missing or malformed field, as the
// remoting.RemotingCommand accessors (ExtString, ExtInt32, ...) report it.
func ParseSendHeader(req *remoting.RemotingCommand, v2 bool) (SendHeader, error) {
	col := 0
	if v2 {
		col = 1
	}
	var r sendFields
	if req.ExtFields == nil {
		for _, f := range req.ExtList { // a repeated key: the last wins, as in a map
			if i := sendKeyIndex(f.Key, v2); i >= 0 {
				r.val[i], r.present = f.Value, r.present|1<<i
			}
		}
	} else {
		for i := range sendHeaderKeys {
			if v, ok := req.Ext(sendHeaderKeys[i][col]); ok {
				r.val[i], r.present = v, r.present|1<<i
			}
		}
	}
	r.col = col
	h := SendHeader{
		ProducerGroup:         r.str(sendKeyProducerGroup, true),
		Topic:                 r.str(sendKeyTopic, true),
		DefaultTopic:          r.str(sendKeyDefaultTopic, true),
		DefaultTopicQueueNums: r.i32(sendKeyDefaultTopicQueueNums, true),
		QueueID:               r.i32(sendKeyQueueID, true),
		SysFlag:               r.i32(sendKeySysFlag, true),
		BornTimestamp:         r.i64(sendKeyBornTimestamp, true),
		Flag:                  r.i32(sendKeyFlag, true),
		Properties:            r.str(sendKeyProperties, false),
		ReconsumeTimes:        r.i32(sendKeyReconsumeTimes, false),
		UnitMode:              r.bool(sendKeyUnitMode),
		MaxReconsumeTimes:     -1,
	}
	if r.present&(1<<sendKeyMaxReconsumeTimes) != 0 {
		h.MaxReconsumeTimes = r.i32(sendKeyMaxReconsumeTimes, false)
	}
	h.Batch = r.bool(sendKeyBatch)
	h.BrokerName = r.str(sendKeyBrokerName, false)
	return h, r.err
}

// sendKeyIndex returns the [sendHeaderKeys] index of ext key k (one-letter V2 keys when
// v2, else the long keys), or -1 for another key.
func sendKeyIndex(k string, v2 bool) int {
	if v2 {
		if len(k) == 1 && k[0] >= 'a' && int(k[0]-'a') < len(sendHeaderKeys) {
			return int(k[0] - 'a')
		}
		return -1
	}
	for i := range sendHeaderKeys {
		if sendHeaderKeys[i][0] == k {
			return i
		}
	}
	return -1
}

// sendFields holds the raw send-header values by [sendHeaderKeys] index and parses
// them, keeping the first error (later reads return zero values). Its errors are those
// of the remoting.RemotingCommand accessors for the same values.
type sendFields struct {
	val     [len(sendHeaderKeys)]string
	present uint32 // bit i: field i is present
	col     int    // 0: SEND_MESSAGE keys, 1: V2 keys (for error field names)
	err     error
}

func (r *sendFields) key(i int) string { return sendHeaderKeys[i][r.col] }

func (r *sendFields) missing(i int) {
	r.err = &remoting.HeaderError{Field: r.key(i), Reason: "required ext field is missing"}
}

func (r *sendFields) str(i int, required bool) string {
	if r.err != nil {
		return ""
	}
	if r.present&(1<<i) == 0 && required {
		r.missing(i)
	}
	return r.val[i]
}

func (r *sendFields) i32(i int, required bool) int32 {
	return int32(r.int(i, required, 32, "int32"))
}

func (r *sendFields) i64(i int, required bool) int64 {
	return r.int(i, required, 64, "int64")
}

func (r *sendFields) int(i int, required bool, bits int, kind string) int64 {
	if r.err != nil {
		return 0
	}
	v := r.val[i]
	if v == "" {
		if required {
			r.missing(i)
		}
		return 0
	}
	n, err := strconv.ParseInt(v, 10, bits)
	if err != nil {
		r.err = &remoting.HeaderError{Field: r.key(i), Reason: "value " + strconv.Quote(v) + " is not a decimal " + kind, Err: err}
		return 0
	}
	return n
}

func (r *sendFields) bool(i int) bool {
	if r.err != nil {
		return false
	}
	switch v := r.val[i]; {
	case v == "":
		return false
	case strings.EqualFold(v, "true"):
		return true
	case strings.EqualFold(v, "false"):
		return false
	default:
		r.err = &remoting.HeaderError{Field: r.key(i), Reason: "value " + strconv.Quote(v) + ` is not "true" or "false"`}
		return false
	}
}

// extReader reads ext fields of a request and keeps the first error; later reads
// after an error return zero values.
type extReader struct {
	req *remoting.RemotingCommand
	err error
}

func (r *extReader) str(key string, required bool) string {
	if r.err != nil {
		return ""
	}
	var s string
	s, r.err = r.req.ExtString(key, required)
	return s
}

func (r *extReader) i32(key string, required bool) int32 {
	if r.err != nil {
		return 0
	}
	var n int32
	n, r.err = r.req.ExtInt32(key, required)
	return n
}

func (r *extReader) i64(key string, required bool) int64 {
	if r.err != nil {
		return 0
	}
	var n int64
	n, r.err = r.req.ExtInt64(key, required)
	return n
}

func (r *extReader) bool(key string) bool {
	if r.err != nil {
		return false
	}
	var v bool
	v, r.err = r.req.ExtBool(key)
	return v
}
