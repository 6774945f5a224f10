// Package config holds [Error], the one error every Sluice package returns for an
// invalid configuration field or call argument: the producer and consumers, the broker
// and its store, admin, kafka, outbox, inbox and console. It imports only the standard
// library, so the SDK core uses it too. Find it with errors.As:
//
//	var ce *config.Error
//	if errors.As(err, &ce) {
//		fmt.Println(ce.Field, ce.Reason)
//	}
package config

import "fmt"

// Error reports an invalid configuration field (or call argument): which one, its
// value when that helps, and what is wrong with it, including the limit.
type Error struct {
	// Package is the reporting package or component, e.g. "admin", "broker", "store",
	// "kafka"; the message starts with it.
	Package string
	// Field names the field, key or argument, e.g. "NamesrvAddrs", "Timeout",
	// "storePathRootDir" (a broker.conf key), "NamesrvAddrs[1]".
	Field string
	// Value is the offending value; nil when there is none to show (a missing field, a
	// secret).
	Value any
	// Reason says what is wrong, including the accepted range or limit where there is
	// one, e.g. "want 1..64 queues".
	Reason string
	// Err is the cause when another check found the problem (e.g. a
	// *message.ValidationError for a group name), nil otherwise; errors.As reaches it.
	Err error
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Error implements error: "<package>: config <field>: <reason>", or with a value
// "<package>: config <field>=<value>: <reason>" (strings quoted).
func (e *Error) Error() string {
	prefix := ""
	if e.Package != "" {
		prefix = e.Package + ": "
	}
	switch v := e.Value.(type) {
	case nil:
		return fmt.Sprintf("%sconfig %s: %s", prefix, e.Field, e.Reason)
	case string:
		return fmt.Sprintf("%sconfig %s=%q: %s", prefix, e.Field, v, e.Reason)
	default:
		return fmt.Sprintf("%sconfig %s=%v: %s", prefix, e.Field, v, e.Reason)
	}
}
