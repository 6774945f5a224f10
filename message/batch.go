package message

import (
	"encoding/binary"
	"fmt"
)

// BatchRecordSize returns the size in bytes of m inside a SEND_BATCH_MESSAGE body:
// 4 TOTALSIZE + 4 MAGICCODE + 4 BODYCRC + 4 FLAG + 4+len(body) + 2+len(properties)
// (Java MessageDecoder.encodeMessage; PROTOCOL §4.5).
func BatchRecordSize(bodyLen, propertiesLen int) int { return 20 + bodyLen + 2 + propertiesLen }

// EncodeBatch encodes msgs as the body of SEND_BATCH_MESSAGE (RocketMQ request code 320):
// back-to-back records of TOTALSIZE, MAGICCODE 0, BODYCRC 0, FLAG, BODY, PROPERTIES.
// It validates every message (see Validate), that all share one topic, that none has a
// delay level, is transactional or targets a retry (%RETRY%) or DLQ (%DLQ%) topic, and that
// the encoded body is at most maxBatchSize bytes (DefaultMaxMessageSize when <= 0).
// It returns a *ValidationError with Field "batch" (or the message field) and sends nothing.
func EncodeBatch(msgs []*Message, maxBatchSize int) ([]byte, error) {
	if maxBatchSize <= 0 {
		maxBatchSize = DefaultMaxMessageSize
	}
	if len(msgs) == 0 {
		return nil, &ValidationError{Field: "batch", Reason: "no messages"}
	}
	topic := msgs[0].Topic
	size := 0
	props := make([]string, len(msgs))
	for i, m := range msgs {
		if err := Validate(m, maxBatchSize); err != nil {
			return nil, err
		}
		switch {
		case m.Topic != topic:
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d has topic %q, batch topic is %q: one topic per batch", i, m.Topic, topic)}
		case m.DelayLevel() > 0:
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d has a delay level: batches cannot be delayed", i)}
		case m.Property(PropertyTransactionPrepared) == "true":
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d is transactional: batches cannot be", i)}
		case IsRetryTopic(m.Topic) || IsDLQTopic(m.Topic):
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("topic %q is a retry or DLQ topic", m.Topic)}
		}
		props[i] = MarshalProperties(m.Properties)
		size += BatchRecordSize(len(m.Body), len(props[i]))
	}
	if size > maxBatchSize {
		return nil, &ValidationError{Field: "batch", Reason: "encoded batch too large", Limit: maxBatchSize, Value: size}
	}
	out := make([]byte, 0, size)
	be := binary.BigEndian
	for i, m := range msgs {
		out = be.AppendUint32(out, uint32(BatchRecordSize(len(m.Body), len(props[i]))))
		out = be.AppendUint32(out, 0)
		out = be.AppendUint32(out, 0)
		out = be.AppendUint32(out, uint32(m.Flag))
		out = be.AppendUint32(out, uint32(len(m.Body)))
		out = append(out, m.Body...)
		out = be.AppendUint16(out, uint16(len(props[i])))
		out = append(out, props[i]...)
	}
	return out, nil
}

// BatchItem is one message decoded from a SEND_BATCH_MESSAGE body.
type BatchItem struct {
	Flag       int32
	Body       []byte
	Properties string // the raw properties string
}

// DecodeBatch splits a SEND_BATCH_MESSAGE body into its messages. It returns a
// *ValidationError with Field "batch" when a record is truncated or its TOTALSIZE does not
// match its fields. Bodies alias b.
func DecodeBatch(b []byte) ([]BatchItem, error) {
	var out []BatchItem
	be := binary.BigEndian
	for off := 0; off < len(b); {
		rest := b[off:]
		if len(rest) < 22 {
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("record at byte %d truncated", off)}
		}
		total := int(int32(be.Uint32(rest)))
		bodyLen := int(int32(be.Uint32(rest[16:])))
		if total < 22 || total > len(rest) || bodyLen < 0 || 20+bodyLen+2 > total {
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("record at byte %d has inconsistent sizes", off)}
		}
		propLen := int(be.Uint16(rest[20+bodyLen:]))
		if 22+bodyLen+propLen != total {
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("record at byte %d has inconsistent sizes", off)}
		}
		out = append(out, BatchItem{
			Flag:       int32(be.Uint32(rest[12:])),
			Body:       rest[20 : 20+bodyLen],
			Properties: string(rest[22+bodyLen : total]),
		})
		off += total
	}
	return out, nil
}
