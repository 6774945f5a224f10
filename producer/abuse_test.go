package producer

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
)

// TestIncompressibleBodyNearLimit (issue 26, finding 7): the producer compressed every
// body over CompressMsgBodyOverHowmuch, and zlib makes random bytes larger: 155 of 155
// sends of 4,194,303 random bytes went over the broker's 4 MiB limit and were refused. A
// body whose compressed form is not smaller is now sent as it is, and arrives intact.
func TestIncompressibleBodyNearLimit(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	createTopic(t, testbroker.Namesrv(b), "Random", 1)
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), SendTimeout: 20 * time.Second})
	body := make([]byte, 4194303-64) // leaves room for the properties the producer adds
	_, _ = rand.Read(body)
	m := message.NewMessage("Random", body)
	r, err := p.SendSync(context.Background(), m)
	if err != nil {
		t.Fatalf("send of %d random bytes: %v", len(body), err)
	}
	if r.Status != message.SendOK {
		t.Fatalf("result %+v", r)
	}
	col := poll(t, b.Addr(), "Random", 1, message.PropertyUniqClientMessageIDKeyIdx)
	testkit.WaitFor(t, 30*time.Second, func() bool { return col.count() == 1 }, "the message to be pulled")
	if d := col.get(m.UniqKey()); len(d) != 1 || !bytes.Equal(d[0].msg.Body, body) {
		t.Fatalf("stored body differs (%d deliveries)", len(d))
	}
	// A compressible body is still sent compressed (and comes back whole).
	big := bytes.Repeat([]byte("compress me "), 100000)
	m2 := message.NewMessage("Random", big)
	if _, err := p.SendSync(context.Background(), m2); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return col.count() == 2 }, "the compressible message to be pulled")
	if d := col.get(m2.UniqKey()); len(d) != 1 || !bytes.Equal(d[0].msg.Body, big) {
		t.Fatal("compressible body differs")
	}
}
