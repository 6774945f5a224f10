package message

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultMessageDelayLevel is RocketMQ's default delay table in its broker.conf form
// (messageDelayLevel): level n waits the n-th duration. [DefaultDelayLevels] is the same
// table parsed.
const DefaultMessageDelayLevel = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

// Timer-message properties of RocketMQ 5.x (Java MessageConst). A RocketMQ 4.x broker, and
// Sluice's, stores them as plain properties and delivers at once; the delay level
// ([PropertyDelayTimeLevel]) is the 4.x way to delay a message.
const (
	PropertyTimerDeliverMs = "TIMER_DELIVER_MS" // absolute delivery time, unix ms
	PropertyTimerDelaySec  = "TIMER_DELAY_SEC"  // delivery delay from the send, in seconds
	PropertyTimerDelayMs   = "TIMER_DELAY_MS"   // delivery delay from the send, in milliseconds
)

// DefaultDelayLevels returns RocketMQ's default delay table (DefaultMessageDelayLevel):
// level n waits element n-1. Each call returns a fresh slice the caller may change.
func DefaultDelayLevels() []time.Duration {
	return []time.Duration{
		1 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
		1 * time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute,
		6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute,
		20 * time.Minute, 30 * time.Minute, 1 * time.Hour, 2 * time.Hour,
	}
}

// ParseDelayLevels parses a messageDelayLevel table ("1s 5s 10s 1m 2h 1d"). Level n is
// element n-1. Units: s, m, h, d (and ms for tests).
func ParseDelayLevels(s string) ([]time.Duration, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("empty delay table")
	}
	out := make([]time.Duration, 0, len(fields))
	for _, f := range fields {
		unit := time.Second
		num := f
		switch {
		case strings.HasSuffix(f, "ms"):
			unit, num = time.Millisecond, strings.TrimSuffix(f, "ms")
		case strings.HasSuffix(f, "s"):
			num = strings.TrimSuffix(f, "s")
		case strings.HasSuffix(f, "m"):
			unit, num = time.Minute, strings.TrimSuffix(f, "m")
		case strings.HasSuffix(f, "h"):
			unit, num = time.Hour, strings.TrimSuffix(f, "h")
		case strings.HasSuffix(f, "d"):
			unit, num = 24*time.Hour, strings.TrimSuffix(f, "d")
		default:
			return nil, fmt.Errorf("level %q has no unit (s, m, h, d)", f)
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("level %q is not a positive whole number of its unit", f)
		}
		out = append(out, time.Duration(n)*unit)
	}
	return out, nil
}
