package compat_test

import (
	"context"
	"os"
	"os/exec"
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
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/officialclient"
	"github.com/sluicemq/sluice/internal/testkit/sdktest"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// TestTLS: a broker with tlsEnable (and its embedded name server) serves Sluice's
// producer, push consumer and admin with a verified certificate, and (in a child
// process) the official Go client with WithTls(true), which does not verify certificates.
func TestTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, clientTLS := testkit.SelfSignedTLS(t)
	dir := t.TempDir()
	log := testLogger(t)
	b, err := broker.New(broker.Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0",
		StorePathRootDir: filepath.Join(dir, "store"), Logger: log,
		TLSEnable: true, TLSCertFile: certFile, TLSKeyFile: keyFile, TLSCAFile: certFile})
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
	const topic = "CompatTLS"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Plain TCP is not served.
	plain, err := admin.New(admin.Config{NamesrvAddrs: []string{ns}, Logger: log, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.ClusterInfo(ctx); err == nil {
		t.Fatal("a plain-TCP admin call to a TLS name server succeeded")
	}
	_ = plain.Close()
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{ns}, Logger: log, TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitTopicRoute(ctx, topic); err != nil {
		t.Fatal(err)
	}

	sp := sdktest.StartProducer(t, producer.Config{NamesrvAddrs: []string{ns}, Group: "compat_tls_sluice", Logger: log,
		InstanceName: clientInstance(t, "sluice-producer"), TLS: clientTLS}, sdktest.MustShutDown)
	for i := range 5 {
		if res, err := sp.SendSync(ctx, message.NewMessage(topic, []byte{'s', byte('0' + i)})); err != nil || res.Status != message.SendOK {
			t.Fatalf("sluice send over TLS: %v %v", res, err)
		}
	}
	// The official client's WithTls changes a process-wide default (its
	// DefaultRemotingClientConfig), which would turn TLS on for every other official
	// client of this test binary: its part runs in a child process.
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOfficialTLSChild$", "-test.count=1")
	child.Env = append(os.Environ(), "SLUICE_TLS_CHILD_NAMESRV="+ns, "SLUICE_TLS_CHILD_TOPIC="+topic)
	if out, err := child.CombinedOutput(); err != nil {
		t.Fatalf("official client over TLS (child process): %v\n%s", err, out)
	}
	var ours atomic.Int32
	sc, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{ns}, Group: "compat_tls_sluice_c",
		InstanceName: clientInstance(t, "sluice-consumer"), ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Logger: log, TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Subscribe(topic, "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		ours.Add(int32(len(msgs)))
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sc.Shutdown(c)
	})
	testkit.WaitFor(t, 45*time.Second, func() bool { return ours.Load() >= 10 }, "the Sluice consumer to receive 10 messages over TLS")
}

// TestOfficialTLSChild is TestTLS's official-client part, run in a child process: the
// official producer and push consumer with WithTls(true) send 5 messages to the TLS
// broker and receive those 5 and Sluice's 5.
func TestOfficialTLSChild(t *testing.T) {
	ns, topic := os.Getenv("SLUICE_TLS_CHILD_NAMESRV"), os.Getenv("SLUICE_TLS_CHILD_TOPIC")
	if ns == "" {
		t.Skip("run by TestTLS in a child process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	op, err := rocketmq.NewProducer(rmqproducer.WithNameServer(primitive.NamesrvAddr{ns}),
		rmqproducer.WithGroupName("compat_tls_official"), rmqproducer.WithInstanceName(clientInstance(t, "official-producer")),
		rmqproducer.WithRetry(1), rmqproducer.WithSendMsgTimeout(5*time.Second), rmqproducer.WithTls(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Start(); err != nil {
		t.Fatal(err)
	}
	defer op.Shutdown()
	for i := range 5 {
		res, err := op.SendSync(ctx, primitive.NewMessage(topic, []byte{'o', byte('0' + i)}))
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("official send over TLS: %v %v", res, err)
		}
	}
	var theirs atomic.Int32
	oc, err := rocketmq.NewPushConsumer(rmqconsumer.WithNameServer(primitive.NamesrvAddr{ns}),
		rmqconsumer.WithGroupName("compat_tls_official_c"), rmqconsumer.WithInstance(clientInstance(t, "official-consumer")),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset), rmqconsumer.WithTls(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := oc.Subscribe(topic, rmqconsumer.MessageSelector{Type: rmqconsumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
			theirs.Add(int32(len(msgs)))
			return rmqconsumer.ConsumeSuccess, nil
		}); err != nil {
		t.Fatal(err)
	}
	if err := oc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = officialclient.ShutdownConsumer(oc) }()
	testkit.WaitFor(t, 40*time.Second, func() bool { return theirs.Load() >= 10 }, "the official consumer to receive 10 messages over TLS")
}
