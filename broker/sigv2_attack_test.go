package broker

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/remoting"
)

// v2Request returns a GET_MAX_OFFSET request signed with signature v2 by ak/sk.
func v2Request(ak, sk string) *remoting.RemotingCommand {
	req := remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": "TBW102", "queueId": "0"}, nil)
	remoting.Credentials{AccessKey: ak, SecretKey: sk, SignatureV2: true}.Sign(req)
	return req
}

// TestSignatureV2NonceQuotaPerAccount: the signature v2 nonce store (1,000,000 nonces,
// each kept ten minutes) was shared by every account, so any signed account could fill
// it with fresh nonces and every v2 request of every account was refused until they
// expired. Each account now has a share (aclSignatureNoncesPerAccount): past it that
// account is refused naming the limit, other accounts are unaffected.
func TestSignatureV2NonceQuotaPerAccount(t *testing.T) {
	b, _ := startACLBroker(t, "", func(c *Config) { c.AclSignatureNoncesPerAccount = 5 })
	relay := newClient(t) // sends what it is given, unsigned by itself
	for i := range 5 {
		if r := invoke(t, relay, b.Addr(), v2Request("consumerKey", "consumerSecret")); r.ResponseCode() != remoting.Success {
			t.Fatalf("v2 request %d within the quota: %d %q", i, r.Code, r.Remark)
		}
	}
	r := invoke(t, relay, b.Addr(), v2Request("consumerKey", "consumerSecret"))
	if r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "holds 5 signature v2 nonces, aclSignatureNoncesPerAccount limit 5") {
		t.Fatalf("v2 request past the account's quota: %d %q", r.Code, r.Remark)
	}
	if r := invoke(t, relay, b.Addr(), v2Request("adminKey", "adminSecret")); r.ResponseCode() != remoting.Success {
		t.Fatalf("another account while the first is over its quota: %d %q", r.Code, r.Remark)
	}
	if n := b.Stats().AclNonceQuotaRefused; n != 1 {
		t.Fatalf("AclNonceQuotaRefused = %d, want 1", n)
	}
}

// TestSignatureV2ReplayAfterRestart: nonces were kept in memory only, so a v2 request
// captured before a restart was accepted again by the restarted broker for as long as
// its time was within aclSignatureSkewMillis. The broker now keeps the highest v2 time
// it accepted (storePathRootDir/config/aclSignatureFloor) and refuses times up to it
// after a restart; requests signed after the restart are accepted.
func TestSignatureV2ReplayAfterRestart(t *testing.T) {
	dir := t.TempDir()
	aclPath := writeACL(t, dir, "")
	store := filepath.Join(dir, "store")
	start := func() *Broker {
		return startBroker(t, store, func(c *Config) {
			c.AclEnable, c.AclFile = true, aclPath
			c.AccessKey, c.SecretKey = "adminKey", "adminSecret"
		})
	}
	b := start()
	relay := newClient(t)
	captured := v2Request("adminKey", "adminSecret")
	replay := func(b *Broker) *remoting.RemotingCommand {
		return invoke(t, relay, b.Addr(), remoting.NewRequest(remoting.GetMaxOffset, maps.Clone(captured.ExtFields), nil))
	}
	if r := replay(b); r.ResponseCode() != remoting.Success {
		t.Fatalf("the captured request itself: %d %q", r.Code, r.Remark)
	}
	if r := replay(b); r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "nonce already used") {
		t.Fatalf("replayed before the restart: %d %q", r.Code, r.Remark)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b = start()
	if r := replay(b); r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "before the last restart") {
		t.Fatalf("replayed after the restart: %d %q", r.Code, r.Remark)
	}
	if r := invoke(t, relay, b.Addr(), v2Request("adminKey", "adminSecret")); r.ResponseCode() != remoting.Success {
		t.Fatalf("a request signed after the restart: %d %q", r.Code, r.Remark)
	}
}
