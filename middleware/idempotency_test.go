package middleware_test

import (
	"context"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

func TestStableKey(t *testing.T) {
	m := testkit.NewExt("T", "x", "order-1 alt", "b")
	m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, "UNIQ1")
	if k := middleware.StableKey(m); k != "order-1" {
		t.Fatalf("with KEYS: %q", k)
	}
	m.RemoveProperty(message.PropertyKeys)
	if k := middleware.StableKey(m); k != "UNIQ1" {
		t.Fatalf("without KEYS: %q", k)
	}
	m.RemoveProperty(message.PropertyUniqClientMessageIDKeyIdx)
	if k := middleware.StableKey(m); k != "" {
		t.Fatalf("neither: %q", k)
	}
	if k := middleware.StableKey(nil); k != "" {
		t.Fatalf("nil: %q", k)
	}
}

func TestIdempotencyKeys(t *testing.T) {
	var got []string
	h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		got = append(got, middleware.IdempotencyKey(ctx))
		return message.ConsumeSuccess, nil
	}, middleware.IdempotencyKeys())
	a, b := testkit.NewExt("T", "x", "a", "1"), testkit.NewExt("T", "x", "b", "2")
	_, _ = h(context.Background(), []*message.MessageExt{a})
	_, _ = h(context.Background(), []*message.MessageExt{a, b}) // a batch: no single key
	_, _ = h(middleware.WithIdempotencyKey(context.Background(), "outer"), []*message.MessageExt{b})
	if len(got) != 3 || got[0] != "a" || got[1] != "" || got[2] != "outer" {
		t.Fatalf("keys seen %q", got)
	}
	if k := middleware.IdempotencyKey(middleware.WithIdempotencyKey(context.Background(), "")); k != "" {
		t.Fatalf("empty key stored: %q", k)
	}
}
