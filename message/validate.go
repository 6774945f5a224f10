package message

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of the RocketMQ 4.x protocol and its defaults.
const (
	// MaxTopicLength is the longest topic name in bytes (Java TopicValidator: 127, the
	// record stores the length in one signed byte).
	MaxTopicLength = 127
	// MaxPropertiesLength is the longest encoded properties string in bytes (int16 length field).
	MaxPropertiesLength = 32767
	// DefaultMaxMessageSize is maxMessageSize, the default limit on a message or batch:
	// 4 MiB = 4194304 bytes.
	DefaultMaxMessageSize = 4 << 20
)

// ValidationError reports a message field that breaks a rule. Field names the field
// ("topic", "tag", "body", "properties", "keys", "batch"); Limit and Value are set for size
// limits (bytes), Reason says what is wrong.
type ValidationError struct {
	Field  string
	Reason string
	Limit  int // the limit that was exceeded, in bytes (0 when not a size rule)
	Value  int // the offending size in bytes (0 when not a size rule)
}

// Error implements error: "invalid <Field>: <Reason>", with the size and the limit for a
// size rule.
func (e *ValidationError) Error() string {
	if e.Limit > 0 {
		return fmt.Sprintf("invalid %s: %s (%d bytes, limit %d)", e.Field, e.Reason, e.Value, e.Limit)
	}
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// System topics clients may not send to (Java TopicValidator's not-allowed-send set).
var sendForbiddenTopics = map[string]bool{
	"SCHEDULE_TOPIC_XXXX":         true,
	"RMQ_SYS_TRANS_HALF_TOPIC":    true,
	"RMQ_SYS_TRANS_OP_HALF_TOPIC": true,
	"TRANS_CHECK_MAX_TIME_TOPIC":  true,
	"SELF_TEST_TOPIC":             true,
	"OFFSET_MOVED_EVENT":          true,
	"rmq_sys_wheel_timer":         true, // timer messages until due (broker/timer.go)
}

// IsSystemTopic reports whether topic is one the broker itself owns: the send-forbidden
// system topics (see IsSendForbiddenTopic) and TBW102, the auto-create template. Such
// topics may not be created, updated or deleted by admin requests.
func IsSystemTopic(topic string) bool {
	return sendForbiddenTopics[topic] || topic == "TBW102"
}

// IsSendForbiddenTopic reports whether producers may not send to topic (system topics such
// as SCHEDULE_TOPIC_XXXX and RMQ_SYS_TRANS_HALF_TOPIC; the broker answers NO_PERMISSION, 16).
func IsSendForbiddenTopic(topic string) bool { return sendForbiddenTopics[topic] }

// ValidateTopic checks a topic name: non-empty, at most 127 bytes, only the characters
// % | - _ a-z A-Z 0-9 (Java TopicValidator). It returns a *ValidationError with Field "topic".
func ValidateTopic(topic string) error { return ValidateName("topic", topic, MaxTopicLength) }

// ValidateName checks a topic-like name with RocketMQ's rules: non-empty, at most limit
// bytes, only % | - _ a-z A-Z 0-9. field names the field in the *ValidationError
// ("topic", "consumerGroup", ...); the error never quotes more than 64 bytes of name.
// The broker calls it with the ext-field name for every topic and group (limit
// MaxGroupLength) a request names.
func ValidateName(field, name string, limit int) error {
	if name == "" {
		return &ValidationError{Field: field, Reason: "empty"}
	}
	if len(name) > limit {
		return &ValidationError{Field: field, Reason: "too long", Limit: limit, Value: len(name)}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '%' || c == '|' || c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			shown := fmt.Sprintf("'\\x%02x'", c) // not UTF-8: the byte
			if r, n := utf8.DecodeRuneInString(name[i:]); r != utf8.RuneError || n > 1 {
				shown = strconv.QuoteRune(r)
			}
			return &ValidationError{Field: field, Reason: fmt.Sprintf("character %s at position %d; allowed: %%|-_ letters digits", shown, i)}
		}
	}
	return nil
}

// MaxGroupLength is the longest consumer group name in bytes whose retry and dead-letter
// topics are still valid topics: 127 (MaxTopicLength) minus the 7 bytes of "%RETRY%", the
// longer of the two prefixes. A longer group would work until its first failed message,
// whose %RETRY%<group> topic the store must refuse.
const MaxGroupLength = MaxTopicLength - len(RetryGroupTopicPrefix)

// ValidateGroupTopics checks that a consumer group's derived topics, %RETRY%<group> and
// %DLQ%<group>, are valid topic names: the group is non-empty, at most MaxGroupLength
// (120) bytes, and uses only the topic characters % | - _ a-z A-Z 0-9. It returns a
// *ValidationError with Field "group" naming the limit. The broker calls it wherever a
// group name first reaches it (heartbeat, CONSUMER_SEND_MSG_BACK, pull, group creation).
func ValidateGroupTopics(group string) error {
	if group == "" {
		return &ValidationError{Field: "group", Reason: "empty"}
	}
	if len(group) > MaxGroupLength {
		return &ValidationError{Field: "group", Reason: fmt.Sprintf("too long: its retry topic %s<group> would exceed the %d-byte topic limit",
			RetryGroupTopicPrefix, MaxTopicLength), Limit: MaxGroupLength, Value: len(group)}
	}
	if err := ValidateTopic(group); err != nil { // the characters; the length is checked above
		var ve *ValidationError
		if errors.As(err, &ve) {
			return &ValidationError{Field: "group", Reason: ve.Reason}
		}
		return err
	}
	return nil
}

// ValidateTag checks a tag: empty means "no tag"; otherwise it must not contain "||" (the
// subscription separator), spaces at the ends, or the property separators 0x01/0x02,
// and must not be "*" (the subscribe-all expression). It returns a *ValidationError with
// Field "tag".
func ValidateTag(tag string) error {
	switch {
	case tag == "":
		return nil
	case tag == "*":
		return &ValidationError{Field: "tag", Reason: `"*" is the subscribe-all expression, not a tag`}
	case strings.Contains(tag, "||"):
		return &ValidationError{Field: "tag", Reason: `contains "||", the subscription separator`}
	case strings.TrimSpace(tag) != tag:
		return &ValidationError{Field: "tag", Reason: "leading or trailing space"}
	case strings.ContainsAny(tag, "\x01\x02"):
		return &ValidationError{Field: "tag", Reason: "contains a property separator (0x01 or 0x02)"}
	}
	return nil
}

// validateProperties checks names and values for separators and UTF-8 and the encoded
// length, which it returns (len(MarshalProperties(p)), computed without encoding).
func validateProperties(p map[string]string) (int, error) {
	n := 0
	for k, v := range p {
		if k == "" {
			return 0, &ValidationError{Field: "properties", Reason: "a property has an empty name"}
		}
		if hasSeparator(k) || hasSeparator(v) {
			return 0, &ValidationError{Field: "properties", Reason: fmt.Sprintf("property %q contains a separator (0x01 or 0x02)", k)}
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return 0, &ValidationError{Field: "properties", Reason: fmt.Sprintf("property %q is not valid UTF-8 text", k)}
		}
		if v != "" {
			n += len(k) + len(v) + 2
		}
	}
	n = max(n-1, 0)
	if n > MaxPropertiesLength {
		return 0, &ValidationError{Field: "properties", Reason: "encoded properties too long", Limit: MaxPropertiesLength, Value: n}
	}
	return n, nil
}

// hasSeparator reports whether s contains a property separator, 0x01 or 0x02.
func hasSeparator(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i]-1 < 2 { // 0x01 or 0x02
			return true
		}
	}
	return false
}

// Validate checks m before it is sent: topic rules, tag rules, keys without separators,
// a non-empty body, properties (tag and keys included) of valid UTF-8 text without
// separators and at most 32767 encoded bytes (RocketMQ properties are text: a JSON
// request header would turn other bytes into U+FFFD, a binary one would carry them
// as they are, and Java clients decode them as UTF-8), and the
// encoded size (body bytes + encoded properties bytes) at most maxMessageSize bytes
// (DefaultMaxMessageSize when maxMessageSize <= 0). It returns a *ValidationError naming
// the field and the limit.
func Validate(m *Message, maxMessageSize int) error {
	if m == nil {
		return &ValidationError{Field: "message", Reason: "nil"}
	}
	if maxMessageSize <= 0 {
		maxMessageSize = DefaultMaxMessageSize
	}
	if err := ValidateTopic(m.Topic); err != nil {
		return err
	}
	if err := ValidateTag(m.Tag()); err != nil {
		return err
	}
	if len(m.Body) == 0 {
		return &ValidationError{Field: "body", Reason: "empty"}
	}
	propsLen, err := validateProperties(m.Properties)
	if err != nil {
		return err
	}
	if size := len(m.Body) + propsLen; size > maxMessageSize {
		return &ValidationError{Field: "body", Reason: "message (body + encoded properties) too large", Limit: maxMessageSize, Value: size}
	}
	return nil
}
