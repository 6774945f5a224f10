package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusedOffsetResetPrintsNoSuccess: an offset reset refused by the broker (a
// non-admin account under ACL) printed "reset group G, topic T to TIME" on stdout
// before the error, which reads as a success to someone skimming the output or a script
// reading stdout.
func TestRefusedOffsetResetPrintsNoSuccess(t *testing.T) {
	dir := t.TempDir()
	acl := filepath.Join(dir, "plain_acl.yml")
	if err := os.WriteFile(acl, []byte("accounts:\n  - {accessKey: adminKey, secretKey: adminSecret, admin: true}\n"+
		"  - {accessKey: userKey1, secretKey: userSecret, defaultTopicPerm: PUB|SUB, defaultGroupPerm: SUB}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "broker.conf")
	if err := os.WriteFile(conf, []byte("brokerName=broker-r\naclEnable=true\naclFile="+acl+"\naccessKey=adminKey\nsecretKey=adminSecret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBackground(t, "broker", "-c", conf, "--data-dir", filepath.Join(dir, "store"),
		"--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0", "--log-level", "error")
	ns := b.waitLine(t, brokerLine)[3]
	admin := []string{"--namesrv", ns, "--timeout", "3s", "--access-key", "adminKey", "--secret-key", "adminSecret"}
	if out, err := run(t, append([]string{"admin", "topic", "create", "--topic", "ResetT", "--queues", "2"}, admin...)...); err != nil {
		t.Fatalf("create: %q %v", out, err)
	}
	reset := []string{"admin", "offset", "reset", "--group", "g", "--topic", "ResetT", "--time", "now", "--allow-new-group", "--yes", "--namesrv", ns, "--timeout", "3s"}
	out, err := run(t, append(reset, "--access-key", "userKey1", "--secret-key", "userSecret")...)
	if err == nil || !strings.Contains(err.Error(), "need admin permission") {
		t.Fatalf("reset by a non-admin account: %q %v", out, err)
	}
	if strings.Contains(out, "reset group") {
		t.Errorf("a refused reset printed %q", out)
	}
	if out, err := run(t, append(reset, admin[4:]...)...); err != nil || !strings.Contains(out, "reset group g, topic ResetT") {
		t.Fatalf("reset by the admin: %q %v", out, err)
	}
}
