package peers_test

// The binary (ROCKETMQ) header encoding between the RocketMQ Java client and the Sluice
// broker: the Java client runs with -Drocketmq.serialize.type=ROCKETMQ, so the broker
// decodes its binary requests and answers them in binary, and the client resolves the
// broker's (JSON) transaction check-back with a binary END_TRANSACTION.

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/peers/peertest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/remoting"
)

// sniffer is a TCP proxy in front of a server that records the serialize type of every
// frame the clients send through it. Stop (at t.Cleanup) closes the listener and every
// connection and waits for its goroutines.
type sniffer struct {
	ln    net.Listener
	up    string
	mu    sync.Mutex
	types map[remoting.SerializeType]int
	conns []net.Conn
	wg    sync.WaitGroup
}

func newSniffer(t *testing.T, upstream string) *sniffer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sniffer{ln: ln, up: upstream, types: map[remoting.SerializeType]int{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.stop)
	return s
}

func (s *sniffer) addr() string { return s.ln.Addr().String() }

func (s *sniffer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", s.up)
		if err != nil {
			_ = c.Close()
			continue
		}
		s.mu.Lock()
		s.conns = append(s.conns, c, u)
		s.mu.Unlock()
		s.wg.Add(2)
		go func() { // server to client: copied as is
			defer s.wg.Done()
			_, _ = io.Copy(c, u)
			_ = c.Close()
		}()
		go func() { // client to server: frame by frame, noting each frame's serialize type
			defer s.wg.Done()
			defer u.Close()
			for {
				f, err := remoting.ReadFrame(c, 0)
				if err != nil {
					return
				}
				s.mu.Lock()
				s.types[remoting.SerializeType(f[0])]++
				s.mu.Unlock()
				var lb [4]byte
				binary.BigEndian.PutUint32(lb[:], uint32(len(f)))
				if _, err := u.Write(append(lb[:], f...)); err != nil {
					return
				}
			}
		}()
	}
}

// seen returns how many frames of each serialize type the clients sent.
func (s *sniffer) seen() map[remoting.SerializeType]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[remoting.SerializeType]int{}
	for k, v := range s.types {
		out[k] = v
	}
	return out
}

func (s *sniffer) stop() {
	_ = s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// awkward are property values that the JSON encoding escapes or that are long or not
// ASCII; each must reach consumers unchanged through binary headers.
var awkward = map[string]string{
	"quotes":  `say "hi" and \back\slash\ <b>&amp;</b>`,
	"control": "tab\there\nnew line\r\x03\x1f\x7f",
	"unicode": "héllo wörld 世界 🎉 \u2028\u2029",
	"ключ":    "значение",
	"json":    `{"extFields":{"topic":"x"},"code":310}`,
}

// TestJavaBinaryHeadersAgainstSluice: the RocketMQ Java client with binary headers
// against the Sluice broker. It sends sync (with awkward property values, non-ASCII keys
// and tags, and a 30000-byte property of two-byte characters), async, oneway, batch and
// transactional messages (one committed at once, one resolved by the broker's check-back
// in binary); a concurrent push consumer (one message answered RECONSUME_LATER once), an
// orderly push consumer and a lite pull consumer, all binary, receive every committed
// message with its properties unchanged; a send the broker refuses (properties over
// 32767 bytes) reaches the client with the broker's remark. A proxy in front of the name
// server shows the client really wrote binary headers.
func TestJavaBinaryHeadersAgainstSluice(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts five JVMs (the Java driver and a name-server proxy beside Sluice); run without -short")
	}
	d := peertest.JavaDriver(t).WithJVMFlags(peertest.SerializeRocketMQ)
	b := sluiceBroker(t)
	ns := newSniffer(t, b.NamesrvAddr())
	tg := target{name: "sluice", namesrv: ns.addr(), broker: b.Addr(), adm: newAdmin(t, b.NamesrvAddr())}
	topic := topicFor(t, "BinJava")
	createTopic(t, tg, topic, 4)

	push := consume(t, d, tg, "bin-push", topic, "--later-keys", "later", "--later-times", "1")
	orderly := consume(t, d, tg, "bin-orderly", topic, "--orderly")
	pull := d.Start(t, "pull", "--namesrv", tg.namesrv, "--group", "bin-pull", "--topic", topic)

	long := strings.Repeat("é", 15000) // 30000 bytes, 15000 Java chars
	props := map[string]string{"long": long}
	for k, v := range awkward {
		props[k] = v
	}
	p := d.Start(t, "produce", "--namesrv", tg.namesrv, "--mode", "txn", "--group", "bin-txn-producer")
	in := []peertest.Msg{
		{Topic: topic, Mode: "sync", Tags: "标签", Keys: "ключ-1 k2", Body: "sync-awkward", Props: props},
		{Topic: topic, Mode: "sync", Keys: "later", Body: "sync-later"},
		{Topic: topic, Mode: "async", Keys: "a0", Body: "async-0", Props: awkward},
		{Topic: topic, Mode: "oneway", Keys: "o0", Body: "oneway-0", Props: awkward},
		{Topic: topic, Mode: "batch", Batch: []peertest.Msg{{Topic: topic, Keys: "b0", Body: "batch-0", Props: awkward}, {Topic: topic, Keys: "b1", Body: "batch-1"}}},
		{Topic: topic, Mode: "txn", Keys: "tc", Body: "txn-commit", Txn: "commit", Props: awkward},
		{Topic: topic, Mode: "txn", Keys: "tr", Body: "txn-rollback", Txn: "rollback"},
		{Topic: topic, Mode: "txn", Keys: "tu", Body: "txn-checked", Txn: "unknown", Check: "commit", Props: awkward},
		{Topic: topic, Mode: "sync", Keys: "too-long", Body: "refused", Props: map[string]string{"huge": strings.Repeat("z", 40000)}},
	}
	for _, m := range in {
		p.Send(m)
	}
	const refused = 8
	sent := p.WaitFor(60*time.Second, "every send answered and the check-back", func(evs []peertest.Event) bool {
		return countEvents(evs, "sent") == len(in) && countEvents(evs, "check") >= 1
	})
	for _, e := range sent {
		switch {
		case e.Event == "sent" && e.I == refused:
			// Sluice's remark, decoded by the Java client from a binary answer
			if e.OK || !strings.Contains(e.Error, "properties length 400") || !strings.Contains(e.Error, "exceeds 32767 bytes") {
				t.Errorf("send with 40000 bytes of properties: %+v, want a refusal with the broker's remark", e)
			}
		case e.Event == "sent" && !e.OK:
			t.Errorf("send %d (%+v) failed: %s", e.I, in[e.I], e.Error)
		case e.Event == "check" && e.Keys != "tu":
			t.Errorf("check-back of %q, want only tu", e.Keys)
		}
	}

	want := []string{"async-0", "batch-0", "batch-1", "oneway-0", "sync-awkward", "sync-later", "txn-checked", "txn-commit"}
	for _, c := range []struct {
		name string
		p    *peertest.DriverProc
	}{{"push", push}, {"orderly", orderly}, {"pull", pull}} {
		evs := c.p.WaitFor(60*time.Second, c.name+": every committed message", func(evs []peertest.Event) bool {
			return len(distinctBodies(evs)) >= len(want)
		})
		if got := distinctBodies(evs); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s consumer received %v, want %v", c.name, got, want)
		}
		for _, e := range msgs(evs) {
			checkDelivery(t, c.name, e, props)
		}
	}
	push.WaitFor(30*time.Second, "the message answered RECONSUME_LATER comes back", func(evs []peertest.Event) bool {
		for _, e := range msgs(evs) {
			if e.Keys == "later" && e.ReconsumeTimes == 1 && e.Result == "SUCCESS" {
				return true
			}
		}
		return false
	})
	seen := ns.seen()
	if seen[remoting.SerializeRocketMQ] == 0 || seen[remoting.SerializeJSON] != 0 {
		t.Fatalf("frames the Java clients sent the name server, by serialize type: %v; want only ROCKETMQ", seen)
	}
}

func countEvents(evs []peertest.Event, kind string) int {
	n := 0
	for _, e := range evs {
		if e.Event == kind {
			n++
		}
	}
	return n
}

func distinctBodies(evs []peertest.Event) []string {
	set := map[string]bool{}
	for _, e := range msgs(evs) {
		set[e.Body] = true
	}
	out := make([]string, 0, len(set))
	for b := range set {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

// checkDelivery checks the keys, tag and user properties of one delivery of the
// binary-header test against what was sent.
func checkDelivery(t *testing.T, who string, e peertest.Event, props map[string]string) {
	t.Helper()
	var want map[string]string
	switch e.Body {
	case "sync-awkward":
		want = props
		if e.Keys != "ключ-1 k2" || e.Tags != "标签" {
			t.Errorf("%s: %s keys %q tags %q", who, e.Body, e.Keys, e.Tags)
		}
	case "async-0", "oneway-0", "batch-0", "txn-commit", "txn-checked":
		want = awkward
	default:
		return
	}
	for k, v := range want {
		if got := e.Props[k]; got != v {
			t.Errorf("%s: %s property %q = %.80q (%d bytes), want %.80q (%d bytes)", who, e.Body, k, got, len(got), v, len(v))
		}
	}
}

// TestJavaBinaryHeadersWithACLAgainstSluice: the RocketMQ Java client with binary
// headers signs its requests (AclClientRPCHook) against a Sluice broker with aclEnable:
// its sends (sync and batch, with awkward property values), a push consumer and a lite
// pull consumer are verified and served; a producer with a wrong secret is refused.
func TestJavaBinaryHeadersWithACLAgainstSluice(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts four JVMs; run without -short")
	}
	d := peertest.JavaDriver(t).WithJVMFlags(peertest.SerializeRocketMQ)
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(apacheACL), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ := testbroker.Start(t, broker.Config{AclEnable: true, AclFile: aclFile, AccessKey: "peerAdmin", SecretKey: "peerAdminSecret"})
	adm, err := admin.New(admin.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Logger: testkit.Quiet(),
		Credentials: remoting.Credentials{AccessKey: "peerAdmin", SecretKey: "peerAdminSecret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Close() })
	tg := target{name: "sluice", namesrv: b.NamesrvAddr(), broker: b.Addr(), adm: adm}
	topic := topicFor(t, "BinJavaACL")
	createTopic(t, tg, topic, 2)
	app := []string{"--access-key", "peerApp", "--secret-key", "peerAppSecret"}

	push := consume(t, d, tg, "bin-acl-push", topic, app...)
	pull := d.Start(t, append([]string{"pull", "--namesrv", tg.namesrv, "--group", "bin-acl-pull", "--topic", topic}, app...)...)
	produce(t, d, tg, app,
		peertest.Msg{Topic: topic, Tags: "标签", Keys: "ключ", Body: "signed-sync", Props: awkward},
		peertest.Msg{Topic: topic, Mode: "batch", Batch: []peertest.Msg{{Topic: topic, Body: "signed-batch-0", Props: awkward}, {Topic: topic, Body: "signed-batch-1"}}})
	refused := b.Stats().RefusedACL
	bad := d.Start(t, "produce", "--namesrv", tg.namesrv, "--retries", "0", "--access-key", "peerApp", "--secret-key", "wrong-secret")
	bad.Send(peertest.Msg{Topic: topic, Body: "forged", Props: awkward})
	for _, e := range bad.Close() {
		if e.Event == "sent" && e.OK {
			t.Fatalf("a send signed with a wrong secret was stored: %+v", e)
		}
	}
	if b.Stats().RefusedACL == refused {
		t.Fatal("the ACL refused nothing from the producer with a wrong secret")
	}
	want := []string{"signed-batch-0", "signed-batch-1", "signed-sync"}
	for _, c := range []struct {
		name string
		p    *peertest.DriverProc
	}{{"push", push}, {"pull", pull}} {
		evs := c.p.WaitFor(60*time.Second, c.name+": every message", func(evs []peertest.Event) bool {
			return len(distinctBodies(evs)) >= len(want)
		})
		if got := distinctBodies(evs); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s consumer received %v, want %v", c.name, got, want)
		}
		for _, e := range msgs(evs) {
			if e.Body == "signed-batch-1" {
				continue
			}
			for k, v := range awkward {
				if e.Props[k] != v {
					t.Errorf("%s: %s property %q = %q, want %q", c.name, e.Body, k, e.Props[k], v)
				}
			}
		}
	}
}
