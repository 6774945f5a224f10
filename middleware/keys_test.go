package middleware

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/sluicemq/sluice/message"
)

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// captureSend returns a SendFunc that records the message it was given.
func captureSend(got **message.Message) SendFunc {
	return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
		*got = msg
		return &message.SendResult{MsgID: "m1"}, nil
	}
}

func TestKeysContentKey(t *testing.T) {
	body := []byte(`{"order":42,"amount":"10.00"}`)
	cases := []struct {
		name string
		msg  *message.Message
		want string
	}{
		{"tag", message.NewMessage("T", body).SetTag("refund"), "refund_" + md5hex(body)},
		{"no tag", message.NewMessage("T", body), md5hex(body)},
		{"caller keys kept", message.NewMessage("T", body).SetTag("refund").SetKeys("order-42-refund-7"), "order-42-refund-7"},
		{"space in tag cleaned", message.NewMessage("T", body).SetTag("a b"), "a_b_" + md5hex(body)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got *message.Message
			before := c.msg.Property(message.PropertyKeys)
			if _, err := ChainSend(captureSend(&got), Keys())(context.Background(), c.msg); err != nil {
				t.Fatal(err)
			}
			if k := got.Property(message.PropertyKeys); k != c.want {
				t.Fatalf("KEYS %q, want %q", k, c.want)
			}
			if c.msg.Property(message.PropertyKeys) != before {
				t.Fatalf("caller's message modified: KEYS %q", c.msg.Property(message.PropertyKeys))
			}
			if got.Tag() != c.msg.Tag() || string(got.Body) != string(c.msg.Body) {
				t.Fatalf("copy lost fields: %+v", got)
			}
		})
	}
}

func TestKeysEqualContentCollidesUnlessKeyFunc(t *testing.T) {
	// Two distinct refunds with the same tag and body get the same content key: the
	// documented collision. A business key function separates them.
	r1 := message.NewMessage("T", []byte(`{"account":1,"amount":"10.00"}`)).SetTag("refund").SetProperty("refundId", "r-1")
	r2 := message.NewMessage("T", []byte(`{"account":1,"amount":"10.00"}`)).SetTag("refund").SetProperty("refundId", "r-2")
	keyOf := func(mw SendMiddleware, m *message.Message) string {
		var got *message.Message
		if _, err := ChainSend(captureSend(&got), mw)(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		return got.Property(message.PropertyKeys)
	}
	if a, b := keyOf(Keys(), r1), keyOf(Keys(), r2); a != b {
		t.Fatalf("content keys differ: %q %q", a, b)
	}
	byID := Keys(WithKeyFunc(func(m *message.Message) string { return "refund-" + m.Property("refundId") }))
	if a, b := keyOf(byID, r1), keyOf(byID, r2); a != "refund-r-1" || b != "refund-r-2" {
		t.Fatalf("business keys %q %q", a, b)
	}
	none := Keys(WithKeyFunc(func(*message.Message) string { return "" }))
	if k := keyOf(none, r1); k != "" {
		t.Fatalf("empty key func set %q", k)
	}
}

func TestConsumeKeysMatchesSendSideOverCompressedRecord(t *testing.T) {
	body := []byte("a body long enough to be worth compressing, compressing, compressing, compressing")
	var sent *message.Message
	if _, err := ChainSend(captureSend(&sent), Keys())(context.Background(), message.NewMessage("T", body).SetTag("pay")); err != nil {
		t.Fatal(err)
	}
	sendKey := sent.Property(message.PropertyKeys)

	// The same message as a stored record with a zlib body and no KEYS (a producer that
	// did not use Keys), decoded the way a consumer does.
	z, err := message.Deflate(body, 5)
	if err != nil {
		t.Fatal(err)
	}
	ext := &message.MessageExt{Message: message.Message{Topic: "T", Body: z}, SysFlag: message.SysFlagCompressed,
		BornHost: netip.MustParseAddrPort("127.0.0.1:1"), StoreHost: netip.MustParseAddrPort("127.0.0.1:2")}
	ext.SetTag("pay")
	rec, err := message.EncodeRecord(ext)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := message.DecodeRecord(rec, message.DecodeOptions{Decompress: true})
	if err != nil {
		t.Fatal(err)
	}
	keyed := &message.MessageExt{Message: message.Message{Topic: "T", Body: []byte("x")}}
	keyed.SetKeys("own-key")
	var seen []string
	h := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			seen = append(seen, KeyOf(m))
		}
		return message.ConsumeSuccess, nil
	}
	if _, err := ChainConsume(h, ConsumeKeys())(context.Background(), []*message.MessageExt{got, keyed}); err != nil {
		t.Fatal(err)
	}
	if seen[0] != sendKey || seen[1] != "own-key" {
		t.Fatalf("consume keys %q, send key %q", seen, sendKey)
	}
}

func TestKeyOf(t *testing.T) {
	m := &message.MessageExt{}
	if KeyOf(nil) != "" || KeyOf(m) != "" {
		t.Fatal("key of nil / keyless message")
	}
	m.SetProperty(message.PropertyKeys, "  first second")
	if k := KeyOf(m); k != "first" {
		t.Fatalf("KeyOf %q", k)
	}
}
