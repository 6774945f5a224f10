package middleware_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

func TestRecover(t *testing.T) {
	sentinel := errors.New("sentinel")
	for _, v := range []any{"plain", sentinel} {
		h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			panic(v)
		}, middleware.Recover())
		res, err, reasons := testkit.Call(h, testkit.NewExt("T", "", "k", "b"))
		var pe *middleware.PanicError
		if res != message.ReconsumeLater || !errors.As(err, &pe) || pe.Value != v || !testkit.HasReason(reasons, middleware.ReasonPanic) {
			t.Fatalf("%v: %v %v %v", v, res, err, reasons)
		}
		if !strings.Contains(err.Error(), "observe_test.go") || !strings.Contains(err.Error(), "handler panic") {
			t.Fatalf("no stack in %q", err.Error())
		}
		if (v == sentinel) != errors.Is(err, sentinel) {
			t.Fatalf("Unwrap of %v", v)
		}
	}
	ok := middleware.ChainConsume(testkit.NewEffects().OK(), middleware.Recover())
	if res, err, _ := testkit.Call(ok, testkit.NewExt("T", "", "k", "b")); res != message.ConsumeSuccess || err != nil {
		t.Fatal(res, err)
	}
}
