package producer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestHeaderEncodingsAgainstBroker: with binary request headers (the default) and with
// JSONHeaders, synchronous, asynchronous and batch sends reach the Sluice broker with
// their topic, tags, keys and user properties intact (values with spaces, quotes and
// non-ASCII text, which the two encodings write differently).
func TestHeaderEncodingsAgainstBroker(t *testing.T) {
	br, _ := testbroker.Start(t, broker.Config{})
	for _, jsonHeaders := range []bool{false, true} {
		t.Run(fmt.Sprintf("JSONHeaders=%v", jsonHeaders), func(t *testing.T) {
			topic := fmt.Sprintf("Headers%v", jsonHeaders)
			createTopic(t, testbroker.Namesrv(br), topic, 1)
			p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(br), JSONHeaders: jsonHeaders})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			mk := func(i int) *message.Message {
				m := message.NewMessage(topic, []byte(fmt.Sprintf("body %d", i)))
				m.SetTag("TagA")
				m.SetKeys(fmt.Sprintf("key-%d", i), "second-key")
				m.SetProperty("note", fmt.Sprintf(`"quoted" \ värde %d`, i))
				return m
			}
			if _, err := p.SendSync(ctx, mk(0)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			if err := p.SendAsync(ctx, mk(1), func(_ *message.SendResult, err error) { done <- err }); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if _, err := p.SendBatch(ctx, []*message.Message{mk(2), mk(3)}); err != nil {
				t.Fatal(err)
			}
			rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			msgs, _, err := pull(ctx, rc, br.Addr(), "HeadersGroup", topic, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != 4 {
				t.Fatalf("stored %d messages, want 4", len(msgs))
			}
			for i, m := range msgs {
				if string(m.Body) != fmt.Sprintf("body %d", i) || m.Tag() != "TagA" ||
					m.Property(message.PropertyKeys) != fmt.Sprintf("key-%d second-key", i) || m.Property("note") != fmt.Sprintf(`"quoted" \ värde %d`, i) {
					t.Fatalf("message %d stored as body %q tags %q keys %q note %q", i, m.Body, m.Tag(), m.Property(message.PropertyKeys), m.Property("note"))
				}
			}
		})
	}
}
