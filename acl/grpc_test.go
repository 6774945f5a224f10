package acl

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

// grpcAuth builds the authorization value a RocketMQ 5 client sends for dateTime.
func grpcAuth(ak, sk, dateTime string) string {
	m := hmac.New(sha1.New, []byte(sk))
	m.Write([]byte(dateTime))
	return "MQv2-HMAC-SHA1 Credential=" + ak + "//Rocketmq, SignedHeaders=x-mq-date-time, Signature=" + hex.EncodeToString(m.Sum(nil))
}

func TestAuthenticateGRPC(t *testing.T) {
	f, err := Parse([]byte(sampleACL))
	if err != nil {
		t.Fatal(err)
	}
	v, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	dt := now.Add(-30 * time.Second).Format(GRPCDateTimeLayout)
	cases := []struct {
		name, remote, auth, dt string
		want                   string // "" ok, else part of the error
	}{
		{"signed", "1.2.3.4:5", grpcAuth("RocketMQ", "12345678", dt), dt, ""},
		{"wrong secret", "1.2.3.4:5", grpcAuth("RocketMQ", "87654321", dt), dt, "check signature failed"},
		{"unknown key", "1.2.3.4:5", grpcAuth("nobody1", "12345678", dt), dt, "no acl config"},
		{"no header", "1.2.3.4:5", "", dt, "required"},
		{"no date-time", "1.2.3.4:5", grpcAuth("RocketMQ", "12345678", dt), "", "x-mq-date-time: required"},
		{"other date-time", "1.2.3.4:5", grpcAuth("RocketMQ", "12345678", dt), now.Format(GRPCDateTimeLayout), "check signature failed"},
		{"too old", "1.2.3.4:5", grpcAuth("RocketMQ", "12345678", "20261202T115400Z"), "20261202T115400Z", "more than 5m0s"},
		{"local time of UTC+8", "1.2.3.4:5", grpcAuth("RocketMQ", "12345678", "20261202T200000Z"), "20261202T200000Z", "run them in UTC"},
		{"bad layout", "1.2.3.4:5", grpcAuth("RocketMQ", "12345678", "2026-12-02"), "2026-12-02", "want yyyyMMdd"},
		{"other algorithm", "1.2.3.4:5", strings.Replace(grpcAuth("RocketMQ", "12345678", dt), "SHA1", "SHA256", 1), dt, "want \"MQv2-HMAC-SHA1\""},
		{"short signature", "1.2.3.4:5", func() string { s := grpcAuth("RocketMQ", "12345678", dt); return s[:len(s)-2] }(), dt, "40 hexadecimal"},
		{"no signed headers", "1.2.3.4:5", strings.Replace(grpcAuth("RocketMQ", "12345678", dt), "x-mq-date-time", "host", 1), dt, "SignedHeaders"},
		{"huge", "1.2.3.4:5", strings.Repeat("x", 2000), dt, "limit 1024"},
		{"global white list", "10.10.103.7:5", "", "", ""},
		{"account white address", "192.168.1.9:5", grpcAuth("rocketmq2", "wrong-secret", dt), dt, ""},
	}
	for _, tc := range cases {
		c, err := v.authenticateGRPC(tc.remote, tc.auth, tc.dt, now)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		case tc.want != "" && (!errors.Is(err, ErrUnauthenticated) || !errors.Is(err, ErrDenied)):
			t.Errorf("%s: %v does not wrap ErrUnauthenticated and ErrDenied", tc.name, err)
		case tc.want == "" && c == nil:
			t.Errorf("%s: no caller", tc.name)
		}
		if err != nil && strings.Contains(err.Error(), "12345678") {
			t.Errorf("%s: the error reveals the secret: %v", tc.name, err)
		}
	}

	// Permissions are the account's, as on the remoting port.
	c, err := v.authenticateGRPC("1.2.3.4:5", grpcAuth("RocketMQ", "12345678", dt), dt, now)
	if err != nil {
		t.Fatal(err)
	}
	if c.AccessKey() != "RocketMQ" {
		t.Fatalf("access key %q", c.AccessKey())
	}
	for _, r := range []Resource{Topic("topicB", Pub), Topic("topicC", Sub), Group("groupB", Sub), Group("other", Sub), Topic("topicB", Any)} {
		if err := c.Check(r); err != nil || !c.Allows(r) {
			t.Errorf("%v: %v", r, err)
		}
	}
	for _, r := range []Resource{Topic("topicA", Sub), Topic("topicC", Pub), Topic("unlisted", Pub), Group("groupA", Sub)} {
		err := c.Check(Topic("topicB", Pub), r)
		if err == nil || c.Allows(r) || !errors.Is(err, ErrDenied) || errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%v: %v, want a permission refusal", r, err)
		}
	}
	// An admin account without entries passes every check.
	c, err = v.authenticateGRPC("192.168.1.9:5", grpcAuth("rocketmq2", "12345678", dt), dt, now)
	if err != nil || c.Check(Topic("anything", Pub), Group("any", Sub)) != nil {
		t.Fatalf("admin: %v", err)
	}
}
