package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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

// TestHeaderEncodingsSameOutcome: the two header encodings give the same result for
// property values at the edges: properties made of the characters JSON escapes (whose
// JSON header is several times longer) that fill the 32767 bytes with the broker's
// CLUSTER are stored unchanged with both; 32767 bytes as sent are refused by the broker
// (MESSAGE_ILLEGAL, not retried) with both; one byte more is refused before sending with
// both, also when it is the UNIQ_KEY the producer adds that makes it too long; and text
// that is not UTF-8 (which a JSON header cannot carry: it would arrive as U+FFFD, while
// a binary header carries the bytes as they are) is refused before sending with both,
// in a property, a tag or a key.
func TestHeaderEncodingsSameOutcome(t *testing.T) {
	br, _ := testbroker.Start(t, broker.Config{})
	const escapes = "<>&\"\\\x03\t\u2028é"
	// withLen returns a message of topic whose encoded properties (one property "v", and
	// UNIQ_KEY when uniq) are n bytes long.
	withLen := func(topic string, n int, uniq bool) *message.Message {
		m, total := message.NewMessage(topic, []byte("edge")), n
		if uniq {
			m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
			n -= len(message.MarshalProperties(m.Properties)) + 1
		}
		n -= len("v") + 1 // "v" 0x01 value (0x02 between properties)
		v := strings.Repeat(escapes, n/len(escapes)+1)[:n]
		for !utf8.ValidString(v) { // cut inside a multi-byte character: shift the cut
			v = v[:len(v)-1] + "x"
		}
		m.SetProperty("v", v)
		if got := len(message.MarshalProperties(m.Properties)); got != total {
			t.Fatalf("test message has %d bytes of properties", got)
		}
		return m
	}
	for _, jsonHeaders := range []bool{false, true} {
		t.Run(fmt.Sprintf("JSONHeaders=%v", jsonHeaders), func(t *testing.T) {
			topic := fmt.Sprintf("Edges%v", jsonHeaders)
			createTopic(t, testbroker.Namesrv(br), topic, 1)
			p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(br), JSONHeaders: jsonHeaders})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// the broker adds CLUSTER=DefaultCluster: what fits is that much less
			fits := withLen(topic, message.MaxPropertiesLength-len("CLUSTER\x01DefaultCluster\x02"), true)
			if _, err := p.SendSync(ctx, fits); err != nil {
				t.Fatalf("properties that fit with CLUSTER: %v", err)
			}
			var se *SendError
			var re *remoting.ResponseError
			if _, err := p.SendSync(ctx, withLen(topic, message.MaxPropertiesLength, true)); !errors.As(err, &se) || !errors.As(err, &re) ||
				re.Code != remoting.MessageIllegal || se.Attempts != 1 || !strings.Contains(re.Remark, "32767") {
				t.Fatalf("properties of exactly 32767 bytes, over with CLUSTER: %v, want MESSAGE_ILLEGAL naming the limit after one attempt", err)
			}
			var ve *message.ValidationError
			for name, m := range map[string]*message.Message{
				"one byte over":                withLen(topic, message.MaxPropertiesLength+1, true),
				"over with the added UNIQ_KEY": withLen(topic, message.MaxPropertiesLength, false),
			} {
				if _, err := p.SendSync(ctx, m); !errors.As(err, &ve) || ve.Field != "properties" || ve.Limit != message.MaxPropertiesLength {
					t.Errorf("properties %s: %v, want a ValidationError for properties naming the limit", name, err)
				}
			}
			for name, m := range map[string]*message.Message{
				"property value": message.NewMessage(topic, []byte("x")).SetProperty("bad", "ok \xff\xfe then \xe4\xb8"),
				"property name":  message.NewMessage(topic, []byte("x")).SetProperty("b\xc3d", "v"),
				"tag":            message.NewMessage(topic, []byte("x")).SetTag("t\xff"),
				"key":            message.NewMessage(topic, []byte("x")).SetKeys("k\x80"),
			} {
				if _, err := p.SendSync(ctx, m); !errors.As(err, &ve) {
					t.Errorf("%s not UTF-8: %v, want a ValidationError", name, err)
				}
			}
			rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			msgs, _, err := pull(ctx, rc, br.Addr(), "EdgesGroup", topic, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != 1 || msgs[0].Property("v") != fits.Property("v") {
				t.Fatalf("stored %d messages (want 1, the one that fits, with its property unchanged)", len(msgs))
			}
		})
	}
}
