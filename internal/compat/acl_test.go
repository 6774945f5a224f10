package compat_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/officialclient"
	"github.com/sluicemq/sluice/internal/testkit/sdktest"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

const compatACL = `accounts:
  - accessKey: adminKey
    secretKey: adminSecret
    admin: true
  - accessKey: appKey01
    secretKey: appSecret01
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
`

// startACLBroker starts a broker (with an embedded name server) that has aclEnable and
// the accounts of compatACL, its own admin account adminKey/adminSecret, logging to log;
// it is shut down when the test ends.
func startACLBroker(t *testing.T, log *slog.Logger) *broker.Broker {
	t.Helper()
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(compatACL), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0",
		StorePathRootDir: filepath.Join(dir, "store"), Logger: log,
		AclEnable: true, AclFile: aclFile, AccessKey: "adminKey", SecretKey: "adminSecret"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	return b
}

// TestOfficialClientWithCredentials: a broker with aclEnable accepts the official Go
// client's signatures (WithCredentials) with the right secret and refuses them with a
// wrong one (SYSTEM_ERROR, as RocketMQ does); Sluice's admin and producer sign too.
func TestOfficialClientWithCredentials(t *testing.T) {
	t.Parallel()
	log := testLogger(t)
	b := startACLBroker(t, log)
	ns := b.NamesrvAddr()
	const topic, group = "CompatACL", "compat_acl_group"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Sluice admin: refused unsigned, accepted with the admin account.
	for _, cred := range []remoting.Credentials{{}, {AccessKey: "adminKey", SecretKey: "adminSecret"}} {
		a, err := admin.New(admin.Config{NamesrvAddrs: []string{ns}, Logger: log, Credentials: cred})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 2})
		if cred.Enabled() && err != nil {
			t.Fatalf("signed create topic: %v", err)
		}
		if !cred.Enabled() && err == nil {
			t.Fatal("unsigned create topic accepted")
		}
		if cred.Enabled() {
			if _, err := a.WaitTopicRoute(ctx, topic); err != nil {
				t.Fatal(err)
			}
		}
		_ = a.Close()
	}

	official := func(instance string, cred primitive.Credentials) rocketmq.Producer {
		p, err := rocketmq.NewProducer(rmqproducer.WithNameServer(primitive.NamesrvAddr{ns}),
			rmqproducer.WithGroupName("compat_acl_producer"), rmqproducer.WithInstanceName(clientInstance(t, instance)),
			rmqproducer.WithRetry(1), rmqproducer.WithSendMsgTimeout(5*time.Second), rmqproducer.WithCredentials(cred))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Shutdown() })
		return p
	}
	good := official("good", primitive.Credentials{AccessKey: "appKey01", SecretKey: "appSecret01"})
	for i := range 5 {
		res, err := good.SendSync(ctx, primitive.NewMessage(topic, []byte{'o', byte('0' + i)}))
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("official send with the right secret: %v %v", res, err)
		}
	}
	refusedBefore := b.Stats().RefusedACL
	bad := official("bad", primitive.Credentials{AccessKey: "appKey01", SecretKey: "wrong-secret"})
	if res, err := bad.SendSync(ctx, primitive.NewMessage(topic, []byte("x"))); err == nil {
		t.Fatalf("official send with a wrong secret accepted: %v", res)
	}
	if b.Stats().RefusedACL == refusedBefore {
		t.Fatal("the wrong secret was not refused by the ACL")
	}

	sp := sdktest.StartProducer(t, producer.Config{NamesrvAddrs: []string{ns}, Group: "compat_acl_sluice", Logger: log,
		InstanceName: clientInstance(t, "sluice"), Credentials: remoting.Credentials{AccessKey: "appKey01", SecretKey: "appSecret01"}}, sdktest.MustShutDown)
	for i := range 5 {
		if res, err := sp.SendSync(ctx, message.NewMessage(topic, []byte{'s', byte('0' + i)})); err != nil || res.Status != message.SendOK {
			t.Fatalf("sluice send with credentials: %v %v", res, err)
		}
	}

	// The official consumer, signed, receives all ten.
	var got atomic.Int32
	c, err := rocketmq.NewPushConsumer(rmqconsumer.WithNameServer(primitive.NamesrvAddr{ns}),
		rmqconsumer.WithGroupName(group), rmqconsumer.WithInstance(clientInstance(t, "consumer")),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
		rmqconsumer.WithCredentials(primitive.Credentials{AccessKey: "appKey01", SecretKey: "appSecret01"}))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, rmqconsumer.MessageSelector{Type: rmqconsumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
			got.Add(int32(len(msgs)))
			return rmqconsumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = officialclient.ShutdownConsumer(c) })
	testkit.WaitFor(t, 45*time.Second, func() bool { return got.Load() >= 10 }, "the signed official consumer to receive 10 messages")
}

// awkwardProps are property values the JSON header escapes (quotes, backslashes,
// control characters, HTML characters, U+2028) or that are long and not ASCII; a
// request's signature covers them.
var awkwardProps = map[string]string{
	"quotes":  `"quoted" \back\slash\ <b>&amp;</b>`,
	"control": "tab\tline\nfeed\r\x03\x1f\x7f",
	"unicode": "héllo 世界 🎉 \u2028",
	"ключ":    "значение",
	"long":    strings.Repeat("é", 10000),
}

// TestSDKHeaderEncodingsWithCredentials: against a broker with aclEnable, Sluice's
// producer, pull consumer and push consumer sign their requests with binary headers
// (the default) and with JSONHeaders; the signatures, over ext values the two encodings
// write differently, verify with the right secret, and every request with a wrong
// secret is refused. Messages arrive with their properties unchanged, and the pull
// consumer's signed offset commit reads back.
func TestSDKHeaderEncodingsWithCredentials(t *testing.T) {
	t.Parallel()
	log := testLogger(t)
	b := startACLBroker(t, log)
	ns := []string{b.NamesrvAddr()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm, err := admin.New(admin.Config{NamesrvAddrs: ns, Logger: log, Credentials: remoting.Credentials{AccessKey: "adminKey", SecretKey: "adminSecret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	good := remoting.Credentials{AccessKey: "appKey01", SecretKey: "appSecret01"}
	bad := remoting.Credentials{AccessKey: "appKey01", SecretKey: "wrong-secret"}

	for _, jsonHeaders := range []bool{false, true} {
		t.Run(fmt.Sprintf("JSONHeaders=%v", jsonHeaders), func(t *testing.T) {
			topic := fmt.Sprintf("CompatACLHeaders%v", jsonHeaders)
			if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 2}); err != nil {
				t.Fatal(err)
			}
			if _, err := adm.WaitTopicRoute(ctx, topic); err != nil {
				t.Fatal(err)
			}
			p := sdktest.StartProducer(t, producer.Config{NamesrvAddrs: ns, Group: "compat_acl_headers", Logger: log,
				InstanceName: clientInstance(t, "good"), Credentials: good, JSONHeaders: jsonHeaders}, sdktest.MustShutDown)
			const n = 4
			for i := range n {
				m := message.NewMessage(topic, []byte(fmt.Sprintf("m%d", i))).SetTag("标签").SetKeys(fmt.Sprintf("ключ-%d", i))
				for k, v := range awkwardProps {
					m.SetProperty(k, v)
				}
				if _, err := p.SendSync(ctx, m); err != nil {
					t.Fatalf("signed send %d: %v", i, err)
				}
			}

			refused := b.Stats().RefusedACL
			pb := sdktest.StartProducer(t, producer.Config{NamesrvAddrs: ns, Group: "compat_acl_headers", Logger: log,
				InstanceName: clientInstance(t, "bad"), Credentials: bad, JSONHeaders: jsonHeaders, RetryTimesWhenSendFailed: -1}, sdktest.MayFail)
			if _, err := pb.SendSync(ctx, message.NewMessage(topic, []byte("forged")).SetProperty("quotes", awkwardProps["quotes"])); err == nil {
				t.Fatal("send signed with a wrong secret accepted")
			}
			if b.Stats().RefusedACL == refused {
				t.Fatal("the send with a wrong secret was not refused by the ACL")
			}

			check := func(who string, m *message.MessageExt) {
				t.Helper()
				if !strings.HasPrefix(m.Keys()[0], "ключ-") || m.Tag() != "标签" {
					t.Errorf("%s: %s keys %v tag %q", who, m.Body, m.Keys(), m.Tag())
				}
				for k, v := range awkwardProps {
					if got := m.Property(k); got != v {
						t.Errorf("%s: %s property %q = %.60q (%d bytes), want %d bytes", who, m.Body, k, got, len(got), len(v))
					}
				}
			}

			pull := func(cred remoting.Credentials) *consumer.PullConsumer {
				return sdktest.StartPullConsumer(t, consumer.PullConfig{NamesrvAddrs: ns, Group: fmt.Sprintf("compat_acl_pull_%v", jsonHeaders),
					Logger: log, Credentials: cred, JSONHeaders: jsonHeaders})
			}
			pc := pull(good)
			if got := sdktest.PullEveryQueue(ctx, t, pc, topic, "标签", func(m *message.MessageExt) { check("pull", m) }); got != n {
				t.Fatalf("signed pulls returned %d messages, want %d", got, n)
			}
			mqs, err := pc.MessageQueues(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			badPull := pull(bad)
			refused = b.Stats().RefusedACL
			if _, err := badPull.Pull(ctx, consumer.PullRequest{Queue: mqs[0]}); err == nil {
				t.Fatal("pull signed with a wrong secret accepted")
			}
			if b.Stats().RefusedACL == refused {
				t.Fatal("the pull with a wrong secret was not refused by the ACL")
			}

			sdktest.PushReceives(t, consumer.Config{NamesrvAddrs: ns, Group: fmt.Sprintf("compat_acl_push_%v", jsonHeaders),
				ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Logger: log, Credentials: good, JSONHeaders: jsonHeaders},
				topic, n, 30*time.Second, func(m *message.MessageExt) { check("push", m) })
		})
	}
}
