package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Dead letters of the schedule service.
//
// A delayed message (a plain DELAY send, or a consume retry on its way to
// %RETRY%<group>) that cannot be written to its real topic is not retried forever: every
// message of its delay level waits behind it, and every group's first retry waits on
// level 3. After scheduleDeliverAttempts failed tries (at once for an error no retry can
// fix: an invalid topic, a message too large) it goes to dead letters and the level moves
// on:
//   - a retry message (REAL_TOPIC %RETRY%<group>) to %DLQ%<group> when that is a valid
//     topic, as a consume retry past its last attempt would;
//   - otherwise to the broker-level error queue %DLQ%SLUICE_UNDELIVERABLE (admin tools
//     read it like any group's dead letters: group SLUICE_UNDELIVERABLE).
//
// The copy keeps REAL_TOPIC and REAL_QID and gets the property SLUICE_UNDELIVERABLE_REASON
// with the last error.
const (
	// scheduleDeliverAttempts bounds the tries of one due message before it goes to the
	// dead letters (the level loop waits 1 s between tries).
	scheduleDeliverAttempts = 3
	// UndeliverableGroup names the broker-level error queue %DLQ%SLUICE_UNDELIVERABLE,
	// where the schedule service puts due messages it could deliver neither to their
	// topic nor to their group's dead letters.
	UndeliverableGroup = "SLUICE_UNDELIVERABLE"
	// PropertyUndeliverableReason is set on a dead-lettered scheduled message: why it
	// could not be delivered (the last error).
	PropertyUndeliverableReason = "SLUICE_UNDELIVERABLE_REASON"
)

// groupError returns a SYSTEM_ERROR response naming the request field and the limit when
// group cannot have valid %RETRY% and %DLQ% topics (see [message.ValidateGroupTopics]),
// nil when it can.
func groupError(field, group string) *remoting.RemotingCommand {
	if err := message.ValidateGroupTopics(group); err != nil {
		return errResponse(remoting.SystemError, "%s: %v", field, err)
	}
	return nil
}

// permanentPutError reports whether a put failed for a reason no retry can fix.
func permanentPutError(err error) bool {
	var ia *store.InvalidArgumentError
	var ve *message.ValidationError
	return errors.Is(err, store.ErrMessageTooLarge) || errors.As(err, &ia) || errors.As(err, &ve)
}

// deadLetterTopic returns where an undeliverable scheduled message goes.
func (b *Broker) deadLetterTopic(realTopic string) string {
	if message.IsRetryTopic(realTopic) {
		group := strings.TrimPrefix(realTopic, message.RetryGroupTopicPrefix)
		if message.ValidateTopic(message.DLQTopic(group)) == nil {
			return b.ensureDLQ(group)
		}
	}
	return b.ensureDLQ(UndeliverableGroup)
}

// deadLetter writes a copy of the scheduled message m, which failed attempts times with
// cause, to the dead letters and logs it. It returns the put error, if any (the level
// then tries again later).
func (s *scheduler) deadLetter(ctx context.Context, m *message.MessageExt, cause error, attempts int) error {
	realTopic := m.Property(message.PropertyRealTopic)
	topic := s.b.deadLetterTopic(realTopic)
	out := &message.MessageExt{
		Message:        message.Message{Topic: topic, Flag: m.Flag, Body: m.Body, Properties: make(map[string]string, len(m.Properties)+1)},
		SysFlag:        m.SysFlag,
		BornTimestamp:  m.BornTimestamp,
		BornHost:       m.BornHost,
		StoreHost:      s.b.storeHost,
		ReconsumeTimes: m.ReconsumeTimes,
	}
	for k, v := range m.Properties {
		out.Properties[k] = v
	}
	out.RemoveProperty(message.PropertyDelayTimeLevel)
	reason := fmt.Sprintf("undeliverable to %q after %d attempt(s): %v", realTopic, attempts, cause)
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	out.SetProperty(PropertyUndeliverableReason, strings.Map(func(r rune) rune {
		if r == message.NameValueSeparator || r == message.PropertySeparator || r == 0 {
			return ' '
		}
		return r
	}, reason))
	if err := s.put(ctx, out, message.TagHashCode(out.Tag())); err != nil {
		return fmt.Errorf("dead-letter to %s: %w", topic, err)
	}
	s.b.log.Error("delayed message undeliverable; moved to dead letters", "topic", realTopic, "deadLetters", topic,
		"msgId", m.Property(message.PropertyUniqClientMessageIDKeyIdx), "offsetMsgId", m.OffsetMsgID,
		"delayLevel", m.Property(message.PropertyDelayTimeLevel), "attempts", strconv.Itoa(attempts), "err", cause)
	return nil
}
