package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
)

// TestSecureBrokerAndAdmin: a broker started from a broker.conf with aclEnable and
// tlsEnable; `sluice admin` needs --tls-ca (or --tls --tls-insecure) and an admin
// account's keys to create a topic.
func TestSecureBrokerAndAdmin(t *testing.T) {
	dir := t.TempDir()
	cert, key, _ := testkit.SelfSignedTLS(t)
	acl := filepath.Join(dir, "plain_acl.yml")
	if err := os.WriteFile(acl, []byte("accounts:\n  - {accessKey: adminKey, secretKey: adminSecret, admin: true}\n"+
		"  - {accessKey: userKey1, secretKey: userSecret, defaultTopicPerm: PUB, defaultGroupPerm: SUB}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "broker.conf")
	if err := os.WriteFile(conf, []byte("brokerName=broker-s\naclEnable=true\naclFile="+acl+"\naccessKey=adminKey\nsecretKey=adminSecret\n"+
		"tlsEnable=true\ntlsCertFile="+cert+"\ntlsKeyFile="+key+"\ntlsCAFile="+cert+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBackground(t, "broker", "-c", conf, "--data-dir", filepath.Join(dir, "store"),
		"--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0", "--log-level", "error")
	ns := b.waitLine(t, brokerLine)[3]
	create := func(extra ...string) (string, error) {
		return run(t, append([]string{"admin", "topic", "create", "--namesrv", ns, "--topic", "SecureT", "--timeout", "3s"}, extra...)...)
	}
	if _, err := create(); err == nil {
		t.Fatal("plain TCP admin succeeded against a TLS broker")
	}
	if _, err := create("--tls-ca", cert); err == nil {
		t.Fatal("unsigned admin created a topic under ACL")
	}
	if _, err := create("--tls-ca", cert, "--access-key", "userKey1", "--secret-key", "userSecret"); err == nil {
		t.Fatal("a non-admin account created a topic")
	}
	if out, err := create("--tls", "--tls-insecure", "--access-key", "adminKey", "--secret-key", "adminSecret"); err != nil ||
		!strings.Contains(out, "created topic SecureT") {
		t.Fatalf("admin create: %q %v", out, err)
	}
	if err := b.stop(t); err != nil {
		t.Errorf("broker command returned %v after cancel", err)
	}
}
