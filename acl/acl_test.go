package acl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/remoting"
)

const sampleACL = `
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.{1,2}
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
`

func signed(ak, sk string, code remoting.RequestCode, ext map[string]string, body []byte) *remoting.RemotingCommand {
	cmd := remoting.NewRequest(code, ext, body)
	remoting.Credentials{AccessKey: ak, SecretKey: sk}.Sign(cmd)
	return cmd
}

func TestParseAndCheck(t *testing.T) {
	f, err := Parse([]byte(sampleACL))
	if err != nil {
		t.Fatal(err)
	}
	v, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	ext := func() map[string]string { return map[string]string{"topic": "topicB", "consumerGroup": "groupB"} }
	body := []byte("hello")
	cases := []struct {
		name   string
		remote string
		cmd    *remoting.RemotingCommand
		admin  bool
		res    []Resource
		ok     bool
	}{
		{"global white list", "10.10.103.7:1234", remoting.NewRequest(remoting.SendMessage, ext(), nil), false, []Resource{Topic("topicA", Pub)}, true},
		{"global white {a,b}", "192.168.0.2:1", remoting.NewRequest(remoting.SendMessage, ext(), nil), true, nil, true},
		{"not white, unsigned", "192.168.0.3:1", remoting.NewRequest(remoting.SendMessage, ext(), nil), false, nil, false},
		{"unknown key", "127.0.0.1:1", signed("nobody1", "12345678", remoting.SendMessage, ext(), nil), false, nil, false},
		{"right secret", "127.0.0.1:1", signed("RocketMQ", "12345678", remoting.SendMessage, ext(), body), false, []Resource{Topic("topicB", Pub)}, true},
		{"wrong secret", "127.0.0.1:1", signed("RocketMQ", "12345679", remoting.SendMessage, ext(), body), false, []Resource{Topic("topicB", Pub)}, false},
		{"topic DENY", "127.0.0.1:1", signed("RocketMQ", "12345678", remoting.SendMessage, ext(), nil), false, []Resource{Topic("topicA", Pub)}, false},
		{"topic SUB only, PUB needed", "127.0.0.1:1", signed("RocketMQ", "12345678", remoting.SendMessage, ext(), nil), false, []Resource{Topic("topicC", Pub)}, false},
		{"default topic DENY", "127.0.0.1:1", signed("RocketMQ", "12345678", remoting.PullMessage, ext(), nil), false, []Resource{Topic("other", Sub)}, false},
		{"default group SUB", "127.0.0.1:1", signed("RocketMQ", "12345678", remoting.PullMessage, ext(), nil), false, []Resource{Group("other", Sub), Topic("topicC", Sub)}, true},
		{"group DENY", "127.0.0.1:1", signed("RocketMQ", "12345678", remoting.PullMessage, ext(), nil), false, []Resource{Group("groupA", Sub)}, false},
		{"ANY met by SUB", "127.0.0.1:1", signed("RocketMQ", "12345678", remoting.PullMessage, ext(), nil), false, []Resource{Topic("topicC", Any)}, true},
		{"admin code, not admin", "127.0.0.1:1", signed("RocketMQ", "12345678", remoting.UpdateAndCreateTopic, ext(), nil), true, nil, false},
		{"admin code, admin", "127.0.0.1:1", signed("rocketmq2", "12345678", remoting.UpdateAndCreateTopic, ext(), nil), true, []Resource{Topic("x", Pub)}, true},
		{"account white address skips signature", "192.168.1.9:1", signed("rocketmq2", "wrong-secret", remoting.DeleteTopicInBroker, ext(), nil), true, nil, true},
	}
	for _, c := range cases {
		err := v.Check(c.remote, c.cmd, c.admin, c.res)
		if (err == nil) != c.ok {
			t.Errorf("%s: ok=%v, err=%v", c.name, c.ok, err)
		}
		if err != nil && !errors.Is(err, ErrDenied) {
			t.Errorf("%s: %v does not wrap ErrDenied", c.name, err)
		}
		if err != nil && strings.Contains(err.Error(), "12345678") {
			t.Errorf("%s: error reveals the secret: %v", c.name, err)
		}
	}
	// A body changed after signing is refused.
	cmd := signed("RocketMQ", "12345678", remoting.SendMessage, ext(), body)
	cmd.Body = []byte("hellO")
	if err := v.Check("127.0.0.1:1", cmd, false, nil); err == nil {
		t.Error("tampered body accepted")
	}
}

// TestSignatureMatchesGoClient checks the content rule against the official Go client's:
// with a SecurityToken the Go client leaves its value out; both forms verify.
func TestSignatureForms(t *testing.T) {
	ext := map[string]string{"b": "2", "a": "1", remoting.ExtAccessKey: "AK", remoting.ExtSecurityToken: "TOK"}
	withTok := remoting.Signature("sk", ext, []byte("x"), false)
	noTok := remoting.Signature("sk", ext, []byte("x"), true)
	if withTok == noTok {
		t.Fatal("token not part of the content")
	}
	for _, sig := range []string{withTok, noTok} {
		cmd := remoting.NewRequest(remoting.SendMessage, map[string]string{"b": "2", "a": "1", remoting.ExtAccessKey: "AK",
			remoting.ExtSecurityToken: "TOK", remoting.ExtSignature: sig}, []byte("x"))
		if !remoting.VerifySignature("sk", cmd) {
			t.Errorf("signature %s not accepted", sig)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for in, want := range map[string]string{
		"accounts:\n  - accessKey: short\n    secretKey: 12345678\n":                                            "accounts[0].accessKey",
		"accounts:\n  - accessKey: abcdefg\n    secretKey: 12\n":                                                "accounts[0].secretKey",
		"accounts:\n  - {accessKey: abcdefg, secretKey: 1234567}\n  - {accessKey: abcdefg, secretKey: 1234567}": "appears twice",
		"accounts:\n  - {accessKey: abcdefg, secretKey: 1234567, topicPerms: [noequals]}":                       "topicPerms[0]",
		"globalWhiteRemoteAddresses: [300.1.1.1-2]":                                                             "globalWhiteRemoteAddresses[0]",
		"unknownKey: 1": "unknownKey",
		"accounts: {":   "acl:",
	} {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: want error naming %q, got %v", in, want, err)
		}
	}
	if _, err := Parse(make([]byte, MaxFileSize+1)); !errors.Is(err, ErrFileTooLarge) {
		t.Errorf("oversize file: %v", err)
	}
	// An empty file is refused (a truncated file must not mean "no accounts"); a file
	// without accounts says so.
	for _, in := range []string{"", "\n \n", "# comment only\n", "~\n", "---\n"} {
		var pe *ParseError
		if _, err := Parse([]byte(in)); !errors.As(err, &pe) || !strings.Contains(err.Error(), "empty") {
			t.Errorf("empty file %q: %v", in, err)
		}
	}
	if f, err := Parse([]byte("accounts: []\n")); err != nil || len(f.Accounts) != 0 {
		t.Errorf("file without accounts: %v", err)
	}
}

func TestAddressPatterns(t *testing.T) {
	for pat, cases := range map[string]map[string]bool{
		"*":                 {"1.2.3.4": true, "::1": true},
		"192.168.1.1-100":   {"192.168.1.1": true, "192.168.1.100": true, "192.168.1.101": false, "192.168.2.5": false},
		"192.168.*":         {"192.168.7.7": true, "192.169.0.1": false},
		"10.0.0.{1,3}":      {"10.0.0.1": true, "10.0.0.3": true, "10.0.0.2": false},
		"1.1.1.1,2.2.2.2":   {"2.2.2.2": true, "3.3.3.3": false},
		"::1":               {"::1": true, "127.0.0.1": false},
		"127.0.0.1":         {"127.0.0.1": true, "::ffff:127.0.0.1": true, "not-an-ip": false},
		"192.168.0-10.*":    {"192.168.10.255": true, "192.168.11.0": false},
		"*.*.*.*":           {"8.8.8.8": true},
		"172.16.0.1, ::2 ":  {"::2": true},
		"2001:db8::{1,2}":   {"2001:db8::2": true, "2001:db8::3": false},
		"100.64.0.0-255":    {"100.64.0.200": true},
		"10.0.*.5":          {"10.0.99.5": true, "10.0.99.6": false},
		"192.168.1.100-100": {"192.168.1.100": true},
	} {
		p, err := parseAddrPattern(pat)
		if err != nil {
			t.Errorf("%q: %v", pat, err)
			continue
		}
		for host, want := range cases {
			if got := p.match(host); got != want {
				t.Errorf("%q matches %q = %v, want %v", pat, host, got, want)
			}
		}
	}
	for _, bad := range []string{"", "1.2.3.4.5", "a.b", "1.2.3.{4", "1.2.3.300", "1.2.3.9-4", "x"} {
		if _, err := parseAddrPattern(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestHotReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain_acl.yml")
	write := func(perm string) {
		t.Helper()
		data := "accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, defaultTopicPerm: " + perm + ", defaultGroupPerm: SUB}\n"
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("DENY")
	v, err := Load(path, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	done := make(chan struct{})
	go func() { defer close(done); v.Watch(ctx, 20*time.Millisecond) }()
	t.Cleanup(func() { <-done }) // t.Context is cancelled before cleanups run
	allowed := func() bool {
		cmd := signed("RocketMQ", "12345678", remoting.SendMessage, map[string]string{"topic": "T"}, nil)
		return v.Check("127.0.0.1:1", cmd, false, []Resource{Topic("T", Pub)}) == nil
	}
	if allowed() {
		t.Fatal("DENY allowed")
	}
	write("PUB")
	testkit.WaitFor(t, 5*time.Second, allowed, "the reload to allow PUB")
	if err := os.WriteFile(path, []byte("accounts: ["), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Reload(); err == nil {
		t.Fatal("broken file reloaded")
	}
	if !allowed() {
		t.Fatal("a broken file replaced the rules in force")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(sampleACL))
	f.Add([]byte("globalWhiteRemoteAddresses: ['*']"))
	f.Add([]byte("globalWhiteRemoteAddresses: ['1.2.3.4']\nwhiteListGrantsAdmin: false\naccounts: []"))
	f.Add([]byte("# only a comment\n"))
	f.Add([]byte("~"))
	f.Add([]byte("accounts:\n  - {accessKey: abcdefg, secretKey: 1234567, whiteRemoteAddress: '1.2.3.{4,5}'}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		v, err := New(file)
		if err != nil {
			t.Fatalf("Parse accepted what compile refuses: %v", err)
		}
		cmd := signed("abcdefg", "1234567", remoting.PullMessage, map[string]string{"topic": "T"}, data)
		_ = v.Check("1.2.3.4:5", cmd, true, []Resource{Topic("T", Sub), Group("G", Sub)})
	})
}
