package redismw

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

func TestLoggingLevelsAndFields(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		buf.Reset()
		d := newDeduper(t, tg.Client, tg.NS, nil)
		fail := errors.New("db down")
		n := 0
		h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if n++; n == 1 {
				return message.ReconsumeLater, fail
			}
			return message.ConsumeSuccess, nil
		}, middleware.Logging(l), d.Middleware(), middleware.Recover())
		msg := testkit.NewExt("Pay", "paid", "order-9", "b")
		for i := 0; i < 3; i++ {
			testkit.Call(h, msg)
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 3 {
			t.Fatalf("%d log lines: %s", len(lines), buf.String())
		}
		for i, want := range []string{
			`"level":"WARN"`, `"level":"DEBUG"`, `"level":"INFO"`,
		} {
			if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], `"key":"order-9"`) ||
				!strings.Contains(lines[i], `"topic":"Pay"`) || !strings.Contains(lines[i], `"duration"`) {
				t.Fatalf("line %d: %s", i, lines[i])
			}
		}
		if !strings.Contains(lines[0], `"result":"RECONSUME_LATER"`) || !strings.Contains(lines[0], `"error":"db down"`) {
			t.Fatalf("failure line: %s", lines[0])
		}
		if !strings.Contains(lines[2], `"reasons":["duplicate"]`) || !strings.Contains(lines[2], `"result":"CONSUME_SUCCESS"`) {
			t.Fatalf("duplicate line: %s", lines[2])
		}
	})
	// Disabled levels cost nothing and change nothing.
	quiet := testkit.Quiet()
	if res, err, _ := testkit.Call(middleware.ChainConsume(testkit.NewEffects().OK(), middleware.Logging(quiet)), testkit.NewExt("T", "", "k", "b")); res != message.ConsumeSuccess || err != nil {
		t.Fatal(res, err)
	}
}
