package producer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestACLRefusalIsResponseError: a real broker with aclEnable refuses a send by an
// account without PUB permission on the topic. The caller finds the broker's answer
// with errors.As as the one *remoting.ResponseError (code 1 SYSTEM_ERROR, the ACL's
// remark, retryable, the request and the broker), through the *SendError that says how
// many attempts were made.
func TestACLRefusalIsResponseError(t *testing.T) {
	aclFile := filepath.Join(t.TempDir(), "plain_acl.yml")
	acl := "accounts:\n  - accessKey: adminKey\n    secretKey: adminSecret\n    admin: true\n" +
		"  - accessKey: narrowKey\n    secretKey: narrowSecret\n    defaultTopicPerm: DENY\n    defaultGroupPerm: DENY\n    topicPerms: [Mine=PUB]\n"
	if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ := testbroker.Start(t, broker.Config{AclEnable: true, AclFile: aclFile, AccessKey: "adminKey", SecretKey: "adminSecret"})
	adm, err := admin.New(admin.Config{NamesrvAddrs: testbroker.Namesrv(b), Logger: quiet,
		Credentials: remoting.Credentials{AccessKey: "adminKey", SecretKey: "adminSecret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, topic := range []string{"Orders", "Mine"} {
		if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := adm.WaitTopicRoute(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b),
		Credentials: remoting.Credentials{AccessKey: "narrowKey", SecretKey: "narrowSecret"}})
	if _, err := p.SendSync(ctx, message.NewMessage("Mine", []byte("allowed"))); err != nil {
		t.Fatalf("send to a topic the account may write: %v", err)
	}

	_, err = p.SendSync(ctx, message.NewMessage("Orders", []byte("refused")))
	var re *remoting.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("refused send: %v, want a *remoting.ResponseError inside", err)
	}
	if re.Code != remoting.SystemError || !strings.Contains(re.Remark, "no PUB permission on topic Orders") || !re.Retryable() {
		t.Fatalf("answer %#v, want 1 SYSTEM_ERROR naming the missing PUB permission, retryable", re)
	}
	if re.Request != remoting.SendMessageV2 || re.Broker != b.Name() || re.Addr != b.Addr() {
		t.Fatalf("answer from %s %s at %s, want SEND_MESSAGE_V2 from %s at %s", re.Request, re.Broker, re.Addr, b.Name(), b.Addr())
	}
	var se *SendError
	if !errors.As(err, &se) || se.Attempts != 3 || !se.Retryable() || se.BrokerAddr != b.Addr() {
		t.Fatalf("send error %#v, want 3 attempts (1 + RetryTimesWhenSendFailed 2) at %s", se, b.Addr())
	}
}
