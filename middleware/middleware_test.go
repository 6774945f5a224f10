package middleware

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/sluicemq/sluice/message"
)

func TestChainSendOrder(t *testing.T) {
	var trace []string
	mw := func(name string) SendMiddleware {
		return func(next SendFunc) SendFunc {
			return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
				trace = append(trace, name+">")
				r, err := next(ctx, msg)
				trace = append(trace, "<"+name)
				return r, err
			}
		}
	}
	base := func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
		trace = append(trace, "send:"+msg.Topic)
		return &message.SendResult{MsgID: "id1"}, nil
	}
	f := ChainSend(base, mw("a"), nil, mw("b"))
	r, err := f(context.Background(), message.NewMessage("T", []byte("x")))
	if err != nil || r.MsgID != "id1" {
		t.Fatalf("got %v, %v", r, err)
	}
	want := []string{"a>", "b>", "send:T", "<b", "<a"}
	if !reflect.DeepEqual(trace, want) {
		t.Fatalf("order %v, want %v", trace, want)
	}
}

func TestChainConsumeOrderAndErrors(t *testing.T) {
	var trace []string
	boom := errors.New("boom")
	mw := func(name string) ConsumeMiddleware {
		return func(next ConsumeFunc) ConsumeFunc {
			return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				trace = append(trace, name+">")
				r, err := next(ctx, msgs)
				trace = append(trace, "<"+name)
				return r, err
			}
		}
	}
	base := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		trace = append(trace, "handle")
		return message.ReconsumeLater, boom
	}
	h := ChainConsume(base, mw("outer"), mw("inner"))
	r, err := h(context.Background(), []*message.MessageExt{{}})
	if r != message.ReconsumeLater || !errors.Is(err, boom) {
		t.Fatalf("got %v, %v", r, err)
	}
	want := []string{"outer>", "inner>", "handle", "<inner", "<outer"}
	if !reflect.DeepEqual(trace, want) {
		t.Fatalf("order %v, want %v", trace, want)
	}
	// No middlewares: the function itself.
	trace = nil
	if _, err := ChainConsume(base)(context.Background(), nil); !errors.Is(err, boom) || len(trace) != 1 {
		t.Fatalf("empty chain: %v %v", err, trace)
	}
}
