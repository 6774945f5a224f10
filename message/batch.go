package message

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// BatchRecordSize returns the size in bytes of m inside a SEND_BATCH_MESSAGE body:
// 4 TOTALSIZE + 4 MAGICCODE + 4 BODYCRC + 4 FLAG + 4+len(body) + 2+len(properties)
// (Java MessageDecoder.encodeMessage; docs/protocol.md §4.5).
func BatchRecordSize(bodyLen, propertiesLen int) int { return 20 + bodyLen + 2 + propertiesLen }

// EncodeBatch encodes msgs as the body of SEND_BATCH_MESSAGE (RocketMQ request code 320):
// back-to-back records of TOTALSIZE, MAGICCODE 0, BODYCRC 0, FLAG, BODY, PROPERTIES
// (each message's properties as MarshalProperties writes them).
// It validates every message (see Validate), that all share one topic, that none has a
// delay level, is transactional or targets a retry (%RETRY%) or DLQ (%DLQ%) topic, and that
// the encoded body is at most maxBatchSize bytes (DefaultMaxMessageSize when <= 0).
// It returns a *ValidationError with Field "batch" (or the message field) and sends nothing.
//
// Each message's properties are read in one pass over its map that validates, measures
// and collects them, and the records are written into one buffer of the exact size.
func EncodeBatch(msgs []*Message, maxBatchSize int) ([]byte, error) {
	if maxBatchSize <= 0 {
		maxBatchSize = DefaultMaxMessageSize
	}
	if len(msgs) == 0 {
		return nil, &ValidationError{Field: "batch", Reason: "no messages"}
	}
	if msgs[0] == nil {
		return nil, &ValidationError{Field: "message", Reason: "nil"}
	}
	topic := msgs[0].Topic
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	// Pairs of all messages, in order; ends[i] is the end of message i's pairs and props[i]
	// its encoded properties length. On the stack for batches of up to 64 small messages.
	var pairArr [256]property
	var endArr, propArr [64]int
	pairs, ends, props := pairArr[:0], endArr[:0], propArr[:0]
	size := 0
	for i, m := range msgs {
		if m == nil {
			return nil, &ValidationError{Field: "message", Reason: "nil"}
		}
		if m.Topic != topic {
			if err := ValidateTopic(m.Topic); err != nil {
				return nil, err
			}
		}
		lo := len(pairs)
		var b batchProps
		pairs, b = collectBatchProperties(pairs, m.Properties)
		// The checks and their order are Validate's, then the batch rules.
		if err := ValidateTag(b.tag); err != nil {
			return nil, err
		}
		if len(m.Body) == 0 {
			return nil, &ValidationError{Field: "body", Reason: "empty"}
		}
		if b.err != nil {
			return nil, b.err
		}
		if b.length > MaxPropertiesLength {
			return nil, &ValidationError{Field: "properties", Reason: "encoded properties too long", Limit: MaxPropertiesLength, Value: b.length}
		}
		if sz := len(m.Body) + b.length; sz > maxBatchSize {
			return nil, &ValidationError{Field: "body", Reason: "message (body + encoded properties) too large", Limit: maxBatchSize, Value: sz}
		}
		switch {
		case m.Topic != topic:
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d has topic %q, batch topic is %q: one topic per batch", i, m.Topic, topic)}
		case delayLevel(b.delay) > 0:
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d has a delay level: batches cannot be delayed", i)}
		case b.transactional:
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d is transactional: batches cannot be", i)}
		case i == 0 && (IsRetryTopic(topic) || IsDLQTopic(topic)):
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("topic %q is a retry or DLQ topic", topic)}
		}
		sortProperties(pairs[lo:])
		ends = append(ends, len(pairs))
		props = append(props, b.length)
		size += BatchRecordSize(len(m.Body), b.length)
	}
	if size > maxBatchSize {
		return nil, &ValidationError{Field: "batch", Reason: "encoded batch too large", Limit: maxBatchSize, Value: size}
	}
	out := make([]byte, 0, size)
	be := binary.BigEndian
	lo := 0
	for i, m := range msgs {
		out = be.AppendUint32(out, uint32(BatchRecordSize(len(m.Body), props[i])))
		out = be.AppendUint64(out, 0) // MAGICCODE, BODYCRC
		out = be.AppendUint32(out, uint32(m.Flag))
		out = be.AppendUint32(out, uint32(len(m.Body)))
		out = append(out, m.Body...)
		out = be.AppendUint16(out, uint16(props[i]))
		out = appendPropertyPairs(out, pairs[lo:ends[i]])
		lo = ends[i]
	}
	return out, nil
}

// batchProps is what collectBatchProperties learns about one message's properties.
type batchProps struct {
	length        int    // encoded length (len(MarshalProperties))
	tag, delay    string // TAGS and DELAY
	transactional bool   // TRAN_MSG is "true"
	err           error  // the first property error Validate would report
}

// collectBatchProperties appends p's encoded pairs to dst, unsorted, checking them as
// Validate does, and notes the properties the batch rules look at.
func collectBatchProperties(dst []property, p map[string]string) ([]property, batchProps) {
	var b batchProps
	n := 0
	for k, v := range p {
		switch k {
		case PropertyTags:
			b.tag = v
		case PropertyDelayTimeLevel:
			b.delay = v
		case PropertyTransactionPrepared:
			b.transactional = v == "true"
		}
		if k == "" {
			if b.err == nil {
				b.err = &ValidationError{Field: "properties", Reason: "a property has an empty name"}
			}
			continue
		}
		if hasSeparator(k) || hasSeparator(v) {
			if b.err == nil {
				b.err = &ValidationError{Field: "properties", Reason: fmt.Sprintf("property %q contains a separator (0x01 or 0x02)", k)}
			}
			continue
		}
		if v == "" {
			continue
		}
		dst = append(dst, property{k, v})
		n += len(k) + len(v) + 2
	}
	b.length = max(n-1, 0)
	return dst, b
}

// delayLevel parses a DELAY value as Message.DelayLevel does: 0 when empty or unparsable.
func delayLevel(v string) int {
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	return n
}

// BatchItem is one message decoded from a SEND_BATCH_MESSAGE body.
type BatchItem struct {
	Flag       int32
	Body       []byte
	Properties string // the raw properties string
}

// DecodeBatch splits a SEND_BATCH_MESSAGE body into its messages. It returns a
// *ValidationError with Field "batch" when a record is truncated or its TOTALSIZE does not
// match its fields. Bodies alias b; the properties strings share one allocation.
func DecodeBatch(b []byte) ([]BatchItem, error) {
	// First pass: check the framing, count the records and their properties bytes.
	count, propBytes := 0, 0
	for off := 0; off < len(b); {
		total, bodyLen, err := batchRecordAt(b, off)
		if err != nil {
			return nil, err
		}
		count++
		propBytes += total - 22 - bodyLen
		off += total
	}
	if count == 0 {
		return nil, nil
	}
	// Second pass: all properties strings in one string, then the items.
	var sb strings.Builder
	sb.Grow(propBytes)
	for off := 0; off < len(b); {
		total, bodyLen, _ := batchRecordAt(b, off)
		sb.Write(b[off+22+bodyLen : off+total])
		off += total
	}
	all := sb.String()
	out := make([]BatchItem, 0, count)
	be := binary.BigEndian
	p := 0
	for off := 0; off < len(b); {
		total, bodyLen, _ := batchRecordAt(b, off)
		rec := b[off : off+total]
		n := total - 22 - bodyLen
		out = append(out, BatchItem{
			Flag:       int32(be.Uint32(rec[12:])),
			Body:       rec[20 : 20+bodyLen : 20+bodyLen],
			Properties: all[p : p+n],
		})
		p += n
		off += total
	}
	return out, nil
}

// batchRecordAt checks the framing of the batch record at b[off:] and returns its
// TOTALSIZE and body length.
func batchRecordAt(b []byte, off int) (total, bodyLen int, err error) {
	rest := b[off:]
	if len(rest) < 22 {
		return 0, 0, &ValidationError{Field: "batch", Reason: fmt.Sprintf("record at byte %d truncated", off)}
	}
	be := binary.BigEndian
	total = int(int32(be.Uint32(rest)))
	bodyLen = int(int32(be.Uint32(rest[16:])))
	if total < 22 || total > len(rest) || bodyLen < 0 || 20+bodyLen+2 > total {
		return 0, 0, &ValidationError{Field: "batch", Reason: fmt.Sprintf("record at byte %d has inconsistent sizes", off)}
	}
	if propLen := int(be.Uint16(rest[20+bodyLen:])); 22+bodyLen+propLen != total {
		return 0, 0, &ValidationError{Field: "batch", Reason: fmt.Sprintf("record at byte %d has inconsistent sizes", off)}
	}
	return total, bodyLen, nil
}
