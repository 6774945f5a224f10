package compat_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/officialclient"
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

// TestOfficialClientWithCredentials: a broker with aclEnable accepts the official Go
// client's signatures (WithCredentials) with the right secret and refuses them with a
// wrong one (SYSTEM_ERROR, as RocketMQ does); Sluice's admin and producer sign too.
func TestOfficialClientWithCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(compatACL), 0o600); err != nil {
		t.Fatal(err)
	}
	log := testLogger(t)
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

	sp := startSluiceProducer(t, producer.Config{NamesrvAddrs: []string{ns}, Group: "compat_acl_sluice", Logger: log,
		InstanceName: clientInstance(t, "sluice"), Credentials: remoting.Credentials{AccessKey: "appKey01", SecretKey: "appSecret01"}})
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
