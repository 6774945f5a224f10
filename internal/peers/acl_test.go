package peers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/peers/peertest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/sdktest"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

// apacheACL is the plain_acl.yml of the ACL test's Apache broker: an admin account and
// an application account that may publish and subscribe.
const apacheACL = `globalWhiteRemoteAddresses:
accounts:
  - accessKey: peerAdmin
    secretKey: peerAdminSecret
    admin: true
  - accessKey: peerApp
    secretKey: peerAppSecret
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
`

// TestSluiceSDKWithCredentialsAgainstApacheRocketMQ: Apache RocketMQ 4.9.7 with
// aclEnable verifies the signatures of Sluice's producer, pull consumer and push
// consumer with binary headers (the default) and with JSONHeaders: the signed content
// is the ext values, which the two encodings write differently (property values with
// quotes, backslashes, control characters and non-ASCII text). Messages arrive with
// their properties unchanged, the pull consumer's signed offset commit reads back, and
// a wrong secret is refused.
func TestSluiceSDKWithCredentialsAgainstApacheRocketMQ(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts an Apache RocketMQ of its own (two JVMs); run without -short")
	}
	r := peertest.StartRocketMQ(t, peers.RocketMQOptions{BrokerConf: map[string]string{"aclEnable": "true"},
		ConfFiles: map[string]string{"plain_acl.yml": apacheACL}})
	adm, err := admin.New(admin.Config{NamesrvAddrs: []string{r.NamesrvAddr}, Logger: testkit.Quiet(),
		Credentials: remoting.Credentials{AccessKey: "peerAdmin", SecretKey: "peerAdminSecret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Close() })
	good := remoting.Credentials{AccessKey: "peerApp", SecretKey: "peerAppSecret"}
	bad := remoting.Credentials{AccessKey: "peerApp", SecretKey: "wrong-secret"}
	props := map[string]string{}
	for k, v := range awkward {
		props[k] = v
	}
	props["long"] = strings.Repeat("é", 8000)

	for _, jsonHeaders := range []bool{false, true} {
		t.Run(fmt.Sprintf("JSONHeaders=%v", jsonHeaders), func(t *testing.T) {
			tg := target{name: "apache", namesrv: r.NamesrvAddr, broker: r.BrokerAddr, adm: adm}
			topic := topicFor(t, fmt.Sprintf("AclHeaders%v", jsonHeaders))
			createTopic(t, tg, topic, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			newProducer := func(cred remoting.Credentials, sd sdktest.Shutdown) *producer.Producer {
				return sdktest.StartProducer(t, producer.Config{NamesrvAddrs: []string{r.NamesrvAddr}, Group: "acl-producer", Logger: testkit.Quiet(),
					Credentials: cred, JSONHeaders: jsonHeaders, RetryTimesWhenSendFailed: -1}, sd)
			}
			p := newProducer(good, sdktest.MustShutDown)
			mk := func(i int) *message.Message {
				m := message.NewMessage(topic, []byte(fmt.Sprintf("m%d", i))).SetTag("标签").SetKeys(fmt.Sprintf("ключ-%d", i))
				for k, v := range props {
					m.SetProperty(k, v)
				}
				return m
			}
			if _, err := p.SendSync(ctx, mk(0)); err != nil {
				t.Fatalf("signed send: %v", err)
			}
			if _, err := p.SendBatch(ctx, []*message.Message{mk(1), mk(2)}); err != nil {
				t.Fatalf("signed batch: %v", err)
			}
			const n = 3
			if _, err := newProducer(bad, sdktest.MayFail).SendSync(ctx, mk(99)); err == nil {
				t.Fatal("Apache accepted a send signed with a wrong secret")
			}

			check := func(who string, m *message.MessageExt) {
				t.Helper()
				if !strings.HasPrefix(strings.Join(m.Keys(), " "), "ключ-") || m.Tag() != "标签" {
					t.Errorf("%s: %s keys %v tag %q", who, m.Body, m.Keys(), m.Tag())
				}
				for k, v := range props {
					if got := m.Property(k); got != v {
						t.Errorf("%s: %s property %q = %.60q (%d bytes), want %d bytes", who, m.Body, k, got, len(got), len(v))
					}
				}
			}
			newPull := func(cred remoting.Credentials) *consumer.PullConsumer {
				return sdktest.StartPullConsumer(t, consumer.PullConfig{NamesrvAddrs: []string{r.NamesrvAddr}, Group: "acl-pull",
					Logger: testkit.Quiet(), Credentials: cred, JSONHeaders: jsonHeaders})
			}
			pc := newPull(good)
			if got := sdktest.PullEveryQueue(ctx, t, pc, topic, "标签", func(m *message.MessageExt) { check("pull", m) }); got != n {
				t.Fatalf("signed pulls returned %d messages, want %d", got, n)
			}
			mqs, err := pc.MessageQueues(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := newPull(bad).Pull(ctx, consumer.PullRequest{Queue: mqs[0]}); err == nil {
				t.Fatal("Apache accepted a pull signed with a wrong secret")
			}

			sdktest.PushReceives(t, consumer.Config{NamesrvAddrs: []string{r.NamesrvAddr}, Group: fmt.Sprintf("acl-push-%v", jsonHeaders),
				ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Logger: testkit.Quiet(), Credentials: good, JSONHeaders: jsonHeaders},
				topic, n, 60*time.Second, func(m *message.MessageExt) { check("push", m) })
		})
	}
}
