// Package officialclient holds test helpers for the official RocketMQ Go client
// (github.com/apache/rocketmq-client-go/v2) that Sluice's compatibility tests drive.
// It lives apart from testkit so that only tests using the official client compile it.
package officialclient

import (
	"reflect"
	"sync"
	"unsafe"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
)

// ShutdownConsumer shuts an official push consumer down without tripping the
// race detector on a data race inside the official client.
//
// The race (rocketmq-client-go v2.1.3-0.20251226070945, internal/client.go): the
// shared rmqClient's Shutdown sets its plain bool field close (line 555) while a
// rebalance still in flight reads it in InvokeSync (line 576). A rebalance runs right
// after Start, every 20 s, and whenever the broker says the group's members changed,
// so stopping a consumer shortly after it started or right after a fellow member left
// met it about once in ten runs of internal/compat, and `go test -race` fails whichever
// tests happen to be running. The race is the client's, not the broker's; every
// rebalance path holds rmqClient.rbMutex (RebalanceImmediately, RebalanceIfNotPaused)
// and Shutdown never takes it, so holding that mutex around Shutdown orders the write
// after any rebalance in flight and before any later one, which is all the fix needs.
//
// If the client's layout changes (a new version renames the fields), the mutex is not
// found and this falls back to a plain Shutdown.
func ShutdownConsumer(c rocketmq.PushConsumer) error {
	if mu := RebalanceMutex(c); mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
	return c.Shutdown()
}

// RebalanceMutex digs *pushConsumer → defaultConsumer → client (*rmqClient) → rbMutex
// out of an official push consumer by reflection; nil when any step is missing.
func RebalanceMutex(c rocketmq.PushConsumer) *sync.Mutex {
	v := reflect.ValueOf(c)
	for _, name := range []string{"defaultConsumer", "client", "rbMutex"} {
		for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return nil
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return nil
		}
		v = v.FieldByName(name)
		if !v.IsValid() {
			return nil
		}
	}
	if !v.CanAddr() || v.Type() != reflect.TypeOf(sync.Mutex{}) {
		return nil
	}
	return (*sync.Mutex)(unsafe.Pointer(v.UnsafeAddr()))
}

// Quiesced wraps c so that its Shutdown is ShutdownConsumer(c); for code under test
// that takes anything with a Shutdown() error, such as rocketmqofficial.Component.
func Quiesced(c rocketmq.PushConsumer) interface{ Shutdown() error } { return quiesced{c} }

type quiesced struct{ c rocketmq.PushConsumer }

func (q quiesced) Shutdown() error { return ShutdownConsumer(q.c) }
