package broker

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/remoting"
)

// rawConn is a client connection from a chosen loopback address (remoting.Client cannot
// pick its source address), one request at a time.
type rawConn struct {
	t      *testing.T
	nc     net.Conn
	opaque int32
}

// dialFrom connects to addr from the local address ip (127.0.0.x on Linux loopback),
// skipping the test where ip is not local.
func dialFrom(t *testing.T, ip, addr string) *rawConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("needs %s to be a local address (Linux loopback): %v", ip, err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawConn{t: t, nc: nc}
}

// call sends req and returns its answer, skipping requests the broker sends meanwhile.
func (c *rawConn) call(req *remoting.RemotingCommand) *remoting.RemotingCommand {
	c.t.Helper()
	c.opaque++
	req.Opaque = c.opaque
	frame, err := req.Encode()
	if err != nil {
		c.t.Fatal(err)
	}
	_ = c.nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.nc.Write(frame); err != nil {
		c.t.Fatalf("write: %v", err)
	}
	for {
		frame, err := remoting.ReadFrame(c.nc, 16<<20)
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		r, _, err := remoting.DecodeFrame(frame)
		if err != nil {
			c.t.Fatalf("decode: %v", err)
		}
		if r.IsResponse() && r.Opaque == req.Opaque {
			return r
		}
		// A request of the broker's own (NOTIFY_CONSUMER_IDS_CHANGED): not answered.
	}
}

// heartbeat sends a heartbeat body.
func (c *rawConn) heartbeat(body []byte) *remoting.RemotingCommand {
	c.t.Helper()
	return c.call(remoting.NewRequest(remoting.HeartBeat, nil, body))
}

// TestOneAddressCannotFillClientTables: one source address opening connection after
// connection could register client entries (and subscriptions) until maxClientEntries
// (maxSubscriptions) was reached, after which every other client's heartbeat was refused.
// Each address now has a share of those totals (maxClientEntriesPerAddress,
// maxSubscriptionsPerAddress): past it its heartbeats are refused naming the share, while
// a client from another address registers, and nothing a well-behaved client registered
// is dropped to make room.
func TestOneAddressCannotFillClientTables(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.MaxClientEntriesPerConnection, c.MaxClientEntries, c.MaxSubscriptions = 5, 40, 400
		c.MaxClientEntriesPerAddress, c.MaxSubscriptionsPerAddress = 10, 60
	})
	good := dialFrom(t, "127.0.0.1", b.Addr())
	if r := good.heartbeat(heartbeatBody("good", []string{"goodGroup"}, "GoodTopic", 5, "goodProducer")); r.ResponseCode() != remoting.Success {
		t.Fatalf("well-behaved client: %d %s", r.Code, r.Remark)
	}

	// Entries: producer groups, five per connection, from one address until refused.
	var refusal string
	var flood []*rawConn
	for i := 0; i < 20 && refusal == ""; i++ {
		c := dialFrom(t, "127.0.0.2", b.Addr())
		flood = append(flood, c)
		var groups []string
		for j := range 5 {
			groups = append(groups, "flood"+strconv.Itoa(i)+"x"+strconv.Itoa(j))
		}
		if r := c.heartbeat(heartbeatBody("flood"+strconv.Itoa(i), nil, "", 0, groups...)); r.ResponseCode() != remoting.Success {
			refusal = r.Remark
		}
	}
	if !strings.Contains(refusal, "maxClientEntriesPerAddress would be 11, limit 10") {
		t.Fatalf("the entry flood was refused with %q, want maxClientEntriesPerAddress", refusal)
	}

	// Subscriptions: consumer groups of 20 topics each, from a third address.
	refusal = ""
	for i := 0; i < 20 && refusal == ""; i++ {
		c := dialFrom(t, "127.0.0.3", b.Addr())
		if r := c.heartbeat(heartbeatBody("subs"+strconv.Itoa(i), []string{"subs" + strconv.Itoa(i)}, "T"+strconv.Itoa(i)+"-", 20)); r.ResponseCode() != remoting.Success {
			refusal = r.Remark
		}
	}
	if !strings.Contains(refusal, "maxSubscriptionsPerAddress would be 80, limit 60") {
		t.Fatalf("the subscription flood was refused with %q, want maxSubscriptionsPerAddress", refusal)
	}

	// Others still register, and the well-behaved client kept everything.
	other := dialFrom(t, "127.0.0.4", b.Addr())
	if r := other.heartbeat(heartbeatBody("other", []string{"otherGroup"}, "OtherTopic", 10, "otherProducer")); r.ResponseCode() != remoting.Success {
		t.Fatalf("a client from another address was refused: %d %s", r.Code, r.Remark)
	}
	if r := good.heartbeat(heartbeatBody("good", []string{"goodGroup", "goodGroup2"}, "GoodTopic", 5, "goodProducer")); r.ResponseCode() != remoting.Success {
		t.Fatalf("the well-behaved client's next heartbeat: %d %s", r.Code, r.Remark)
	}
	if ids := b.clients.consumerIDs("goodGroup"); len(ids) != 1 || ids[0] != "good" {
		t.Fatalf("goodGroup members %v", ids)
	}
	// 10 flood entries + 3 subscription groups + good's 3 + other's 2.
	if st := b.Stats(); st.ClientEntries != 18 || st.RefusedAddressShare != 2 {
		t.Fatalf("broker keeps %d client entries (want 18), RefusedAddressShare %d (want 2)", st.ClientEntries, st.RefusedAddressShare)
	}
	// The share is freed with the connections.
	for _, c := range flood {
		_ = c.nc.Close()
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return b.Stats().ClientEntries == 8 }, "the flood's entries to be freed")
	if r := dialFrom(t, "127.0.0.2", b.Addr()).heartbeat(heartbeatBody("back", nil, "", 0, "p1", "p2", "p3", "p4", "p5")); r.ResponseCode() != remoting.Success {
		t.Fatalf("the address after its connections closed: %d %s", r.Code, r.Remark)
	}
}
