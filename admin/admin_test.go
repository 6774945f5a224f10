package admin_test

import (
	"context"
	"errors"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = testkit.Quiet()

func ctx(t *testing.T) context.Context { return testkit.Context(t, 10*time.Second) }

func startNS(t *testing.T) *namesrv.NameServer {
	t.Helper()
	ns, err := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, ns.Shutdown)
	return ns
}

// fakeBroker is a remoting server standing in for a broker: it records
// UPDATE_AND_CREATE_TOPIC / DELETE_TOPIC_IN_BROKER requests and, like a real broker,
// registers its changed topic table with the name server.
type fakeBroker struct {
	t             *testing.T
	name, cluster string
	ns            string
	srv           *remoting.Server
	cli           *remoting.Client
	mu            sync.Mutex
	reqs          []*remoting.RemotingCommand
	topics        map[string]*wire.TopicConfig
	version       int64
	answer        *remoting.RemotingCommand // non-nil: answer every create with it
}

func startFakeBroker(t *testing.T, ns, cluster, name string) *fakeBroker {
	t.Helper()
	srv, err := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{t: t, name: name, cluster: cluster, ns: ns, srv: srv, cli: cli, topics: map[string]*wire.TopicConfig{}}
	srv.Handle(remoting.UpdateAndCreateTopic, b.create)
	srv.Handle(remoting.DeleteTopicInBroker, b.delete)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, srv.Shutdown)
	t.Cleanup(func() { cli.Close() })
	if err := b.register(ctx(t)); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *fakeBroker) addr() string { return b.srv.Addr() }

func (b *fakeBroker) register(ctx context.Context) error {
	b.mu.Lock()
	b.version++
	table := make(map[string]*wire.TopicConfig, len(b.topics))
	for k, v := range b.topics {
		c := *v
		table[k] = &c
	}
	w := wire.TopicConfigSerializeWrapper{TopicConfigTable: table, DataVersion: wire.DataVersion{Timestamp: 1, Counter: b.version}}
	b.mu.Unlock()
	_, err := wire.RegisterBroker(ctx, b.cli, b.ns, wire.RegisterBrokerRequest{
		ClusterName: b.cluster, BrokerName: b.name, BrokerAddr: b.addr(), Topics: w})
	return err
}

func (b *fakeBroker) create(ctx context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	b.mu.Lock()
	b.reqs = append(b.reqs, req)
	answer := b.answer
	b.mu.Unlock()
	if answer != nil {
		return answer
	}
	n, err1 := req.ExtInt32("writeQueueNums", true)
	perm, err2 := req.ExtInt32("perm", true)
	topic, err3 := req.ExtString("topic", true)
	if err := errors.Join(err1, err2, err3); err != nil {
		return remoting.NewResponse(remoting.SystemError, err.Error())
	}
	b.mu.Lock()
	b.topics[topic] = &wire.TopicConfig{TopicName: topic, ReadQueueNums: int(n), WriteQueueNums: int(n), Perm: int(perm), TopicFilterType: "SINGLE_TAG"}
	b.mu.Unlock()
	if err := b.register(ctx); err != nil {
		return remoting.NewResponse(remoting.SystemError, err.Error())
	}
	return remoting.NewResponse(remoting.Success, "")
}

func (b *fakeBroker) delete(ctx context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	b.mu.Lock()
	b.reqs = append(b.reqs, req)
	delete(b.topics, req.ExtFields["topic"])
	b.mu.Unlock()
	if err := b.register(ctx); err != nil {
		return remoting.NewResponse(remoting.SystemError, err.Error())
	}
	return remoting.NewResponse(remoting.Success, "")
}

func (b *fakeBroker) requests() []*remoting.RemotingCommand {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*remoting.RemotingCommand(nil), b.reqs...)
}

func newAdmin(t *testing.T, addrs ...string) *admin.Admin {
	t.Helper()
	a, err := admin.New(admin.Config{NamesrvAddrs: addrs, Timeout: 3 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestCreateTopicOnEveryMaster(t *testing.T) {
	ns := startNS(t)
	ba := startFakeBroker(t, ns.Addr(), "DefaultCluster", "broker-a")
	bb := startFakeBroker(t, ns.Addr(), "DefaultCluster", "broker-b")
	// A slave of broker-a on a dead port: CreateTopic must not send to it.
	slaveCli, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer slaveCli.Close()
	if _, err := wire.RegisterBroker(ctx(t), slaveCli, ns.Addr(), wire.RegisterBrokerRequest{
		ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: deadAddr(t), BrokerID: 1}); err != nil {
		t.Fatal(err)
	}

	a := newAdmin(t, ns.Addr())
	res, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "T", Queues: 4})
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	want := []admin.Broker{{Cluster: "DefaultCluster", Name: "broker-a", Addr: ba.addr()}, {Cluster: "DefaultCluster", Name: "broker-b", Addr: bb.addr()}}
	if !reflect.DeepEqual(res.Brokers, want) || res.OrderTopicConf != "" {
		t.Errorf("result = %+v, want brokers %+v", res, want)
	}
	wantExt := map[string]string{"topic": "T", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
		"perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
	for _, b := range []*fakeBroker{ba, bb} {
		reqs := b.requests()
		if len(reqs) != 1 || reqs[0].RequestCode() != remoting.UpdateAndCreateTopic || !reflect.DeepEqual(reqs[0].ExtFields, wantExt) {
			t.Errorf("%s got %d requests, first %+v; want one UPDATE_AND_CREATE_TOPIC with %v", b.name, len(reqs), reqs, wantExt)
		}
	}
	r, err := a.WaitTopicRoute(ctx(t), "T", "broker-a", "broker-b")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range r.QueueDatas {
		if q.WriteQueueNums != 4 || q.Perm != 6 {
			t.Errorf("queue data %+v", q)
		}
	}
	topics, err := a.ListTopics(ctx(t))
	if err != nil || !reflect.DeepEqual(topics, []string{"T"}) {
		t.Errorf("ListTopics = %v %v", topics, err)
	}
	if r, err := a.TopicRoute(ctx(t), "T"); err != nil || len(r.BrokerDatas) != 2 {
		t.Errorf("TopicRoute = %+v %v", r, err)
	}
	if _, err := a.TopicRoute(ctx(t), "missing"); !errors.Is(err, admin.ErrTopicNotExist) {
		t.Errorf("TopicRoute(missing) err = %v", err)
	}

	// Delete: both brokers get DELETE_TOPIC_IN_BROKER, the route goes.
	if _, err := a.DeleteTopic(ctx(t), "T"); err != nil {
		t.Fatal(err)
	}
	for _, b := range []*fakeBroker{ba, bb} {
		reqs := b.requests()
		if len(reqs) != 2 || reqs[1].RequestCode() != remoting.DeleteTopicInBroker || reqs[1].ExtFields["topic"] != "T" {
			t.Errorf("%s requests after delete = %v", b.name, reqs)
		}
	}
	if _, err := a.TopicRoute(ctx(t), "T"); !errors.Is(err, admin.ErrTopicNotExist) {
		t.Errorf("route after delete: %v", err)
	}
}

func TestCreateOrderedTopicWritesOrderConfToEveryNamesrv(t *testing.T) {
	ns1, ns2 := startNS(t), startNS(t)
	startFakeBroker(t, ns1.Addr(), "DefaultCluster", "broker-b")
	startFakeBroker(t, ns1.Addr(), "DefaultCluster", "broker-a")
	a := newAdmin(t, ns1.Addr(), ns2.Addr())
	res, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "O", Queues: 2, Order: true})
	if err != nil {
		t.Fatal(err)
	}
	const want = "broker-a:2;broker-b:2"
	if res.OrderTopicConf != want {
		t.Errorf("OrderTopicConf = %q, want %q", res.OrderTopicConf, want)
	}
	cli, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, ns := range []string{ns1.Addr(), ns2.Addr()} {
		v, err := wire.GetKVConfig(ctx(t), cli, ns, wire.NamespaceOrderTopicConfig, "O")
		if err != nil || v != want {
			t.Errorf("name server %s order conf = %q %v", ns, v, err)
		}
	}
	r, err := a.WaitTopicRoute(ctx(t), "O", "broker-a", "broker-b")
	if err != nil || r.OrderTopicConf != want {
		t.Errorf("route = %+v %v", r, err)
	}
}

func TestCreateTopicReportsBrokerResponseCode(t *testing.T) {
	ns := startNS(t)
	startFakeBroker(t, ns.Addr(), "DefaultCluster", "broker-a")
	bb := startFakeBroker(t, ns.Addr(), "DefaultCluster", "broker-b")
	bb.mu.Lock()
	bb.answer = remoting.NewResponse(remoting.NoPermission, "topic O is conflict with system reserved words")
	bb.mu.Unlock()
	a := newAdmin(t, ns.Addr())
	_, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "O", Order: true})
	var re *remoting.ResponseError
	if !errors.As(err, &re) || re.Broker != "broker-b" || re.Addr != bb.addr() || re.Request != remoting.UpdateAndCreateTopic {
		t.Fatalf("err = %v, want a *remoting.ResponseError from broker-b", err)
	}
	if re.Code != remoting.NoPermission || re.Remark != "topic O is conflict with system reserved words" || !re.Retryable() {
		t.Fatalf("err = %v, want response code 16 with remark, retryable", err)
	}
	// No order config was written.
	cli, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := wire.GetKVConfig(ctx(t), cli, ns.Addr(), wire.NamespaceOrderTopicConfig, "O"); !errors.Is(err, wire.ErrKVNotFound) {
		t.Errorf("order conf after failed create: %v", err)
	}
}

func TestCreateTopicClusterFilter(t *testing.T) {
	ns := startNS(t)
	b1 := startFakeBroker(t, ns.Addr(), "c1", "broker-1")
	b2 := startFakeBroker(t, ns.Addr(), "c2", "broker-2")
	a := newAdmin(t, ns.Addr())
	res, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "T", Cluster: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Brokers) != 1 || res.Brokers[0].Name != "broker-2" {
		t.Errorf("brokers = %+v", res.Brokers)
	}
	if len(b1.requests()) != 0 || len(b2.requests()) != 1 || b2.requests()[0].ExtFields["writeQueueNums"] != "8" {
		t.Errorf("requests: c1 %d, c2 %v (want default 8 queues)", len(b1.requests()), b2.requests())
	}
	if _, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "T", Cluster: "nope"}); !errors.Is(err, admin.ErrNoBroker) {
		t.Errorf("unknown cluster err = %v", err)
	}
}

func TestCreateTopicWithoutBrokers(t *testing.T) {
	ns := startNS(t)
	a := newAdmin(t, ns.Addr())
	if _, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "T"}); !errors.Is(err, admin.ErrNoBroker) {
		t.Errorf("err = %v, want ErrNoBroker", err)
	}
	// Waiting for a route that never comes ends with the context.
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := a.WaitTopicRoute(c, "T"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitTopicRoute err = %v", err)
	}
}

func TestTopicSpecValidation(t *testing.T) {
	ns := startNS(t)
	a := newAdmin(t, ns.Addr())
	for _, tc := range []struct {
		spec  admin.TopicSpec
		field string
	}{
		{admin.TopicSpec{}, "Topic"},
		{admin.TopicSpec{Topic: "bad topic"}, "Topic"},
		{admin.TopicSpec{Topic: "T", Queues: -1}, "Queues"},
		{admin.TopicSpec{Topic: "T", Queues: admin.MaxQueues + 1}, "Queues"},
		{admin.TopicSpec{Topic: "T", Perm: 8}, "Perm"},
		{admin.TopicSpec{Topic: "T", Perm: -2}, "Perm"},
	} {
		_, err := a.CreateTopic(ctx(t), tc.spec)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("CreateTopic(%+v) err = %v, want ConfigError on %s", tc.spec, err, tc.field)
		}
	}
	var ce *config.Error
	if _, err := a.DeleteTopic(ctx(t), ""); !errors.As(err, &ce) {
		t.Errorf("DeleteTopic(\"\") err = %v", err)
	}
}

func TestNamesrvFailoverAndClose(t *testing.T) {
	ns := startNS(t)
	startFakeBroker(t, ns.Addr(), "DefaultCluster", "broker-a")
	a := newAdmin(t, deadAddr(t), ns.Addr())
	if _, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "T"}); err != nil {
		t.Fatalf("CreateTopic with first name server down: %v", err)
	}
	if _, err := a.WaitTopicRoute(ctx(t), "T"); err != nil {
		t.Fatal(err)
	}
	dead := newAdmin(t, deadAddr(t))
	if _, err := dead.ListTopics(ctx(t)); err == nil {
		t.Error("ListTopics with no live name server succeeded")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ListTopics(ctx(t)); !errors.Is(err, admin.ErrClosed) {
		t.Errorf("after Close err = %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []admin.Config{
		{},
		{NamesrvAddrs: []string{"localhost"}},
		{NamesrvAddrs: []string{"127.0.0.1:9876"}, Timeout: -1},
	} {
		var ce *config.Error
		if _, err := admin.New(cfg); !errors.As(err, &ce) {
			t.Errorf("New(%+v) err = %v", cfg, err)
		}
	}
}
