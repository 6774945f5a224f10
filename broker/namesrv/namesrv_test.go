package namesrv_test

import (
	"context"
	"encoding/json"
	"errors"
	"hash/crc32"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, officialClientLeakOptions()...)
}

var quiet = testkit.Quiet()

func startNS(t *testing.T, cfg namesrv.Config) *namesrv.NameServer {
	t.Helper()
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Logger = quiet
	ns, err := namesrv.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := ns.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ns.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return ns
}

func newClient(t *testing.T) *remoting.Client {
	t.Helper()
	c, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx(t *testing.T) context.Context { return testkit.Context(t, 5*time.Second) }

func topics(version int64, tcs ...*wire.TopicConfig) wire.TopicConfigSerializeWrapper {
	w := wire.TopicConfigSerializeWrapper{
		TopicConfigTable: map[string]*wire.TopicConfig{},
		DataVersion:      wire.DataVersion{Timestamp: 1700000000000, Counter: version},
	}
	for _, tc := range tcs {
		w.TopicConfigTable[tc.TopicName] = tc
	}
	return w
}

func topic(name string, queues, perm int) *wire.TopicConfig {
	return &wire.TopicConfig{TopicName: name, ReadQueueNums: queues, WriteQueueNums: queues, Perm: perm, TopicFilterType: "SINGLE_TAG"}
}

func register(t *testing.T, c *remoting.Client, ns string, name, addr string, id int64, w wire.TopicConfigSerializeWrapper) *wire.RegisterBrokerResult {
	t.Helper()
	res, err := wire.RegisterBroker(ctx(t), c, ns, wire.RegisterBrokerRequest{
		ClusterName: "DefaultCluster", BrokerName: name, BrokerAddr: addr, BrokerID: id,
		HAServerAddr: "127.0.0.1:1" + strconv.Itoa(int(id)) + "912", Topics: w,
	})
	if err != nil {
		t.Fatalf("RegisterBroker %s/%d: %v", name, id, err)
	}
	return res
}

// routeBrokers returns the broker names of the topic's route, or nil if it has none.
func routeBrokers(t *testing.T, c *remoting.Client, ns, topic string) []string {
	t.Helper()
	r, err := wire.GetRouteInfo(ctx(t), c, ns, topic)
	if errors.Is(err, wire.ErrTopicNotExist) {
		return nil
	}
	if err != nil {
		t.Fatalf("GetRouteInfo %s: %v", topic, err)
	}
	var out []string
	for _, q := range r.QueueDatas {
		out = append(out, q.BrokerName)
	}
	return out
}

func TestRegisterTwoBrokersRoute(t *testing.T) {
	ns := startNS(t, namesrv.Config{})
	c := newClient(t)
	register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("T", 4, 6), topic("TBW102", 8, 7)))
	register(t, c, ns.Addr(), "broker-b", "127.0.0.1:10921", 0, topics(1, topic("T", 2, 6)))

	r, err := wire.GetRouteInfo(ctx(t), c, ns.Addr(), "T")
	if err != nil {
		t.Fatal(err)
	}
	wantQ := []wire.QueueData{
		{BrokerName: "broker-a", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6},
		{BrokerName: "broker-b", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6},
	}
	if !reflect.DeepEqual(r.QueueDatas, wantQ) {
		t.Errorf("queueDatas = %+v, want %+v", r.QueueDatas, wantQ)
	}
	wantB := []wire.BrokerData{
		{Cluster: "DefaultCluster", BrokerName: "broker-a", BrokerAddrs: map[int64]string{0: "127.0.0.1:10911"}},
		{Cluster: "DefaultCluster", BrokerName: "broker-b", BrokerAddrs: map[int64]string{0: "127.0.0.1:10921"}},
	}
	if !reflect.DeepEqual(r.BrokerDatas, wantB) {
		t.Errorf("brokerDatas = %+v, want %+v", r.BrokerDatas, wantB)
	}
	if r.OrderTopicConf != "" {
		t.Errorf("orderTopicConf = %q, want empty", r.OrderTopicConf)
	}

	// The raw body is strict JSON with the keys the Go client reads.
	resp, err := c.InvokeSync(ctx(t), ns.Addr(), remoting.NewRequest(remoting.GetRouteInfoByTopic, map[string]string{"topic": "TBW102"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	body := string(resp.Body)
	for _, want := range []string{`"queueDatas":[{`, `"brokerAddrs":{"0":"127.0.0.1:10911"}`, `"topicSysFlag":0`, `"topicSynFlag":0`, `"perm":7`, `"filterServerTable":{}`} {
		if !strings.Contains(body, want) {
			t.Errorf("route body %s lacks %s", body, want)
		}
	}
	if !json.Valid(resp.Body) {
		t.Errorf("route body is not valid JSON: %s", body)
	}

	list, err := wire.GetAllTopicList(ctx(t), c, ns.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(list, []string{"T", "TBW102"}) {
		t.Errorf("topic list = %v", list)
	}
	ci, err := wire.GetBrokerClusterInfo(ctx(t), c, ns.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if got := ci.ClusterAddrTable["DefaultCluster"]; !reflect.DeepEqual(got, []string{"broker-a", "broker-b"}) {
		t.Errorf("cluster table = %v", ci.ClusterAddrTable)
	}
	if got := ci.BrokerAddrTable["broker-b"]; got == nil || got.MasterAddr() != "127.0.0.1:10921" {
		t.Errorf("broker table = %+v", ci.BrokerAddrTable)
	}
	if got := ns.LiveBrokers(); !reflect.DeepEqual(got, []string{"127.0.0.1:10911", "127.0.0.1:10921"}) {
		t.Errorf("LiveBrokers = %v", got)
	}
}

func TestSlaveRegistration(t *testing.T) {
	ns := startNS(t, namesrv.Config{})
	c := newClient(t)
	register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("T", 4, 6)))
	// A slave's topic table does not change queue data; it learns the master's addresses.
	res := register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10912", 1, topics(1, topic("T", 16, 6), topic("S", 1, 6)))
	if res.MasterAddr != "127.0.0.1:10911" || res.HAServerAddr != "127.0.0.1:10912" {
		t.Errorf("slave result = %+v, want master 127.0.0.1:10911 ha 127.0.0.1:10912", res)
	}
	r, err := wire.GetRouteInfo(ctx(t), c, ns.Addr(), "T")
	if err != nil {
		t.Fatal(err)
	}
	if r.QueueDatas[0].WriteQueueNums != 4 {
		t.Errorf("slave registration changed queue data: %+v", r.QueueDatas[0])
	}
	if want := map[int64]string{0: "127.0.0.1:10911", 1: "127.0.0.1:10912"}; !reflect.DeepEqual(r.BrokerDatas[0].BrokerAddrs, want) {
		t.Errorf("brokerAddrs = %v, want %v", r.BrokerDatas[0].BrokerAddrs, want)
	}
	if got := routeBrokers(t, c, ns.Addr(), "S"); got != nil {
		t.Errorf("topic only a slave has got a route: %v", got)
	}
	// The master's answer has no master address.
	if res := register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("T", 4, 6))); res.MasterAddr != "" {
		t.Errorf("master result = %+v", res)
	}
	// Master unregisters: the slave keeps the broker name, and its queue data, alive.
	err = wire.UnregisterBroker(ctx(t), c, ns.Addr(), wire.UnregisterBrokerRequest{ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", BrokerID: 0})
	if err != nil {
		t.Fatal(err)
	}
	r, err = wire.GetRouteInfo(ctx(t), c, ns.Addr(), "T")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int64]string{1: "127.0.0.1:10912"}; !reflect.DeepEqual(r.BrokerDatas[0].BrokerAddrs, want) {
		t.Errorf("after master left, brokerAddrs = %v, want %v", r.BrokerDatas[0].BrokerAddrs, want)
	}
}

func TestDataVersionAndIncrementalRegistration(t *testing.T) {
	ns := startNS(t, namesrv.Config{})
	c := newClient(t)
	register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("T", 4, 6), topic("U", 4, 6)))
	// Same version: the table is not re-read (Java semantics).
	register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("T", 8, 6)))
	r, err := wire.GetRouteInfo(ctx(t), c, ns.Addr(), "T")
	if err != nil {
		t.Fatal(err)
	}
	if r.QueueDatas[0].WriteQueueNums != 4 {
		t.Errorf("same data version changed queues: %+v", r.QueueDatas[0])
	}
	// New version with only one topic (what a Java broker sends after creating a
	// topic): T is updated, U stays.
	register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(2, topic("T", 8, 6)))
	if r, err = wire.GetRouteInfo(ctx(t), c, ns.Addr(), "T"); err != nil || r.QueueDatas[0].WriteQueueNums != 8 {
		t.Errorf("new data version: route %+v err %v, want 8 queues", r, err)
	}
	if got := routeBrokers(t, c, ns.Addr(), "U"); !reflect.DeepEqual(got, []string{"broker-a"}) {
		t.Errorf("U route = %v after incremental registration", got)
	}

	id := wire.UnregisterBrokerRequest{ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911"}
	changed, stored, err := wire.QueryDataVersion(ctx(t), c, ns.Addr(), id, wire.DataVersion{Timestamp: 1700000000000, Counter: 2})
	if err != nil || changed || stored == nil || stored.Counter != 2 {
		t.Errorf("QueryDataVersion(same) = %v %+v %v", changed, stored, err)
	}
	changed, _, err = wire.QueryDataVersion(ctx(t), c, ns.Addr(), id, wire.DataVersion{Timestamp: 1700000000000, Counter: 3})
	if err != nil || !changed {
		t.Errorf("QueryDataVersion(newer) = %v %v", changed, err)
	}
	id.BrokerAddr = "127.0.0.1:1"
	changed, stored, err = wire.QueryDataVersion(ctx(t), c, ns.Addr(), id, wire.DataVersion{})
	if err != nil || !changed || stored != nil {
		t.Errorf("QueryDataVersion(unknown broker) = %v %+v %v", changed, stored, err)
	}
}

func TestUnknownTopic(t *testing.T) {
	ns := startNS(t, namesrv.Config{})
	c := newClient(t)
	_, err := wire.GetRouteInfo(ctx(t), c, ns.Addr(), "nope")
	if !errors.Is(err, wire.ErrTopicNotExist) {
		t.Fatalf("err = %v, want ErrTopicNotExist", err)
	}
	resp, err := c.InvokeSync(ctx(t), ns.Addr(), remoting.NewRequest(remoting.GetRouteInfoByTopic, map[string]string{"topic": "nope"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.ResponseCode() != remoting.TopicNotExist || resp.Remark != "No topic route info in name server for the topic: nope" {
		t.Errorf("response = %v %q", resp.ResponseCode(), resp.Remark)
	}
}

func rawRegister(ext map[string]string, body []byte) *remoting.RemotingCommand {
	base := map[string]string{
		"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster",
		"haServerAddr": "127.0.0.1:10912", "brokerId": "0", "compressed": "false",
	}
	for k, v := range ext {
		if v == "-" {
			delete(base, k)
		} else {
			base[k] = v
		}
	}
	return remoting.NewRequest(remoting.RegisterBroker, base, body)
}

func TestRegisterBrokerRejects(t *testing.T) {
	ns := startNS(t, namesrv.Config{})
	c := newClient(t)
	body := []byte(`{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":1},` +
		`"topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}}`)
	goodCRC := strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)&0x7FFFFFFF), 10)
	cases := []struct {
		name       string
		ext        map[string]string
		body       []byte
		code       remoting.ResponseCode
		remarkPart string
	}{
		{"crc mismatch", map[string]string{"bodyCrc32": "12345"}, body, remoting.SystemError, "crc32 not match"},
		{"missing brokerName", map[string]string{"brokerName": "-"}, body, remoting.SystemError, "brokerName"},
		{"empty clusterName", map[string]string{"clusterName": ""}, body, remoting.SystemError, "clusterName"},
		{"bad brokerId", map[string]string{"brokerId": "x"}, body, remoting.SystemError, "brokerId"},
		{"negative brokerId", map[string]string{"brokerId": "-1"}, body, remoting.SystemError, "brokerId"},
		{"comma in addr", map[string]string{"brokerAddr": "127.0.0.1:1,2"}, body, remoting.SystemError, "brokerAddr"},
		{"addr without port", map[string]string{"brokerAddr": "127.0.0.1"}, body, remoting.SystemError, "brokerAddr"},
		{"bad json", map[string]string{}, []byte(`{"topicConfigSerializeWrapper":`), remoting.SystemError, "RegisterBrokerBody"},
		{"compressed", map[string]string{"compressed": "true"}, body, remoting.SystemError, "compressed"},
		{"crc ok", map[string]string{"bodyCrc32": goodCRC}, body, remoting.Success, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.InvokeSync(ctx(t), ns.Addr(), rawRegister(tc.ext, tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if resp.ResponseCode() != tc.code || !strings.Contains(resp.Remark, tc.remarkPart) {
				t.Errorf("response = %v %q, want %v containing %q", resp.ResponseCode(), resp.Remark, tc.code, tc.remarkPart)
			}
		})
	}
	// Only the last (valid) registration took effect.
	if got := routeBrokers(t, c, ns.Addr(), "T"); !reflect.DeepEqual(got, []string{"broker-a"}) {
		t.Errorf("route after rejects = %v", got)
	}
	if got := ns.LiveBrokers(); !reflect.DeepEqual(got, []string{"127.0.0.1:10911"}) {
		t.Errorf("LiveBrokers = %v", got)
	}
	// Unknown codes: REQUEST_CODE_NOT_SUPPORTED, and the connection keeps working.
	resp, err := c.InvokeSync(ctx(t), ns.Addr(), remoting.NewRequest(remoting.RequestCode(9999), nil, nil))
	if err != nil || resp.ResponseCode() != remoting.RequestCodeNotSupported {
		t.Errorf("unknown code: %v %v", resp, err)
	}
	resp, err = c.InvokeSync(ctx(t), ns.Addr(), remoting.NewRequest(remoting.GetRouteInfoByTopic, nil, nil))
	if err != nil || resp.ResponseCode() != remoting.SystemError || !strings.Contains(resp.Remark, "topic") {
		t.Errorf("route without topic: %v %v", resp, err)
	}
	// A registration without body is accepted (no topics).
	resp, err = c.InvokeSync(ctx(t), ns.Addr(), rawRegister(map[string]string{"brokerName": "broker-z", "brokerAddr": "127.0.0.1:10999"}, nil))
	if err != nil || resp.ResponseCode() != remoting.Success {
		t.Errorf("empty body registration: %v %v", resp, err)
	}
}

func TestExpiryRemovesSilentBroker(t *testing.T) {
	ns := startNS(t, namesrv.Config{BrokerExpiry: 300 * time.Millisecond, ScanInterval: 20 * time.Millisecond})
	c := newClient(t)
	register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("T", 4, 6), topic("A", 4, 6)))
	register(t, c, ns.Addr(), "broker-b", "127.0.0.1:10921", 0, topics(1, topic("T", 4, 6)))
	// broker-b keeps registering; broker-a is silent and must go, with its topics.
	testkit.WaitFor(t, 5*time.Second, func() bool {
		register(t, c, ns.Addr(), "broker-b", "127.0.0.1:10921", 0, topics(1, topic("T", 4, 6)))
		return reflect.DeepEqual(routeBrokers(t, c, ns.Addr(), "T"), []string{"broker-b"})
	}, "broker-a to expire")
	if got := routeBrokers(t, c, ns.Addr(), "A"); got != nil {
		t.Errorf("topic of the expired broker still routed: %v", got)
	}
	ci, err := wire.GetBrokerClusterInfo(ctx(t), c, ns.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ci.BrokerAddrTable["broker-a"]; ok {
		t.Errorf("expired broker still in cluster info: %+v", ci)
	}
	if got := ns.LiveBrokers(); !reflect.DeepEqual(got, []string{"127.0.0.1:10921"}) {
		t.Errorf("LiveBrokers = %v", got)
	}
}

func TestConnectionCloseRemovesBroker(t *testing.T) {
	ns := startNS(t, namesrv.Config{}) // default 120 s expiry: removal must come from the close
	ca, cb, reader := newClient(t), newClient(t), newClient(t)
	register(t, ca, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("T", 4, 6)))
	register(t, cb, ns.Addr(), "broker-b", "127.0.0.1:10921", 0, topics(1, topic("T", 4, 6)))
	if got := routeBrokers(t, reader, ns.Addr(), "T"); len(got) != 2 {
		t.Fatalf("route = %v", got)
	}
	ca.CloseConn(ns.Addr())
	testkit.WaitFor(t, 5*time.Second, func() bool {
		return reflect.DeepEqual(routeBrokers(t, reader, ns.Addr(), "T"), []string{"broker-b"})
	}, "broker-a removal after its connection closed")
	// broker-a registers again on a new connection: back in the route.
	register(t, ca, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("T", 4, 6)))
	if got := routeBrokers(t, reader, ns.Addr(), "T"); len(got) != 2 {
		t.Errorf("route after re-registration = %v", got)
	}
	cb.Close()
	testkit.WaitFor(t, 5*time.Second, func() bool {
		return reflect.DeepEqual(routeBrokers(t, reader, ns.Addr(), "T"), []string{"broker-a"})
	}, "broker-b removal after its client closed")
}

func TestUnregisterAndDeleteTopic(t *testing.T) {
	ns := startNS(t, namesrv.Config{})
	c := newClient(t)
	register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("T", 4, 6), topic("D", 4, 6)))
	register(t, c, ns.Addr(), "broker-b", "127.0.0.1:10921", 0, topics(1, topic("T", 4, 6)))
	if err := wire.DeleteTopic(ctx(t), c, ns.Addr(), "D", ""); err != nil {
		t.Fatal(err)
	}
	if got := routeBrokers(t, c, ns.Addr(), "D"); got != nil {
		t.Errorf("deleted topic still routed: %v", got)
	}
	if list, err := wire.GetAllTopicList(ctx(t), c, ns.Addr()); err != nil || !reflect.DeepEqual(list, []string{"T"}) {
		t.Errorf("topic list = %v %v", list, err)
	}
	for _, b := range []struct{ name, addr string }{{"broker-a", "127.0.0.1:10911"}, {"broker-b", "127.0.0.1:10921"}} {
		err := wire.UnregisterBroker(ctx(t), c, ns.Addr(), wire.UnregisterBrokerRequest{ClusterName: "DefaultCluster", BrokerName: b.name, BrokerAddr: b.addr})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := routeBrokers(t, c, ns.Addr(), "T"); got != nil {
		t.Errorf("route after both unregistered = %v", got)
	}
	ci, err := wire.GetBrokerClusterInfo(ctx(t), c, ns.Addr())
	if err != nil || len(ci.BrokerAddrTable) != 0 || len(ci.ClusterAddrTable) != 0 {
		t.Errorf("cluster info = %+v %v", ci, err)
	}
}

func TestKVConfigAndOrderTopicConf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "namesrv", "kvConfig.json")
	ns := startNS(t, namesrv.Config{KVConfigPath: path})
	c := newClient(t)
	register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("O", 4, 6)))
	const conf = "broker-a:4"
	if err := wire.PutKVConfig(ctx(t), c, ns.Addr(), wire.NamespaceOrderTopicConfig, "O", conf); err != nil {
		t.Fatal(err)
	}
	r, err := wire.GetRouteInfo(ctx(t), c, ns.Addr(), "O")
	if err != nil || r.OrderTopicConf != conf {
		t.Fatalf("route = %+v %v, want orderTopicConf %q", r, err, conf)
	}
	// The broker learns the order config in its registration answer.
	res := register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("O", 4, 6)))
	if res.OrderTopicConfig["O"] != conf {
		t.Errorf("register result = %+v", res)
	}
	if v, err := wire.GetKVConfig(ctx(t), c, ns.Addr(), wire.NamespaceOrderTopicConfig, "O"); err != nil || v != conf {
		t.Errorf("GetKVConfig = %q %v", v, err)
	}
	// An order config that is not brokerName:n is refused.
	err = wire.PutKVConfig(ctx(t), c, ns.Addr(), wire.NamespaceOrderTopicConfig, "P", "broker-a")
	var re *remoting.ResponseError
	if !errors.As(err, &re) || re.Code != remoting.SystemError || re.Request != remoting.PutKVConfig || re.Addr != ns.Addr() || re.Broker != "" {
		t.Errorf("bad order conf: err = %v (%#v), want the name server's *remoting.ResponseError", err, re)
	}
	if err := wire.PutKVConfig(ctx(t), c, ns.Addr(), "other", "k", "v"); err != nil {
		t.Fatal(err)
	}

	// Persisted: a new name server on the same file has the values.
	ns2 := startNS(t, namesrv.Config{KVConfigPath: path})
	if v, err := wire.GetKVConfig(ctx(t), c, ns2.Addr(), "other", "k"); err != nil || v != "v" {
		t.Errorf("after restart GetKVConfig = %q %v", v, err)
	}

	if err := wire.DeleteKVConfig(ctx(t), c, ns.Addr(), wire.NamespaceOrderTopicConfig, "O"); err != nil {
		t.Fatal(err)
	}
	if _, err := wire.GetKVConfig(ctx(t), c, ns.Addr(), wire.NamespaceOrderTopicConfig, "O"); !errors.Is(err, wire.ErrKVNotFound) {
		t.Errorf("after delete err = %v, want ErrKVNotFound", err)
	}
	if r, err := wire.GetRouteInfo(ctx(t), c, ns.Addr(), "O"); err != nil || r.OrderTopicConf != "" {
		t.Errorf("after delete route = %+v %v", r, err)
	}
	resp, err := c.InvokeSync(ctx(t), ns.Addr(), remoting.NewRequest(remoting.PutKVConfig, map[string]string{"namespace": "x", "key": "k"}, nil))
	if err != nil || resp.ResponseCode() != remoting.SystemError || !strings.Contains(resp.Remark, "value") {
		t.Errorf("put without value: %v %v", resp, err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, cfg := range []namesrv.Config{
		{ListenAddr: "nohostport"},
		{BrokerExpiry: -time.Second},
		{BrokerExpiry: time.Second, ScanInterval: 2 * time.Second},
		{ScanInterval: -1},
	} {
		if _, err := namesrv.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	// Shutdown before Start and twice is fine; Start after Shutdown is ErrClosed.
	ns, err := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ns.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ns.Start(); !errors.Is(err, namesrv.ErrClosed) {
		t.Errorf("Start after Shutdown = %v", err)
	}
}

func TestRegisterBrokerClientValidation(t *testing.T) {
	c := newClient(t)
	for _, req := range []wire.RegisterBrokerRequest{
		{BrokerName: "a", BrokerAddr: "127.0.0.1:1"},
		{ClusterName: "c", BrokerAddr: "127.0.0.1:1"},
		{ClusterName: "c", BrokerName: "a"},
		{ClusterName: "c", BrokerName: "a", BrokerAddr: "127.0.0.1:1", BrokerID: -1},
	} {
		if _, err := wire.RegisterBroker(ctx(t), c, "127.0.0.1:1", req); err == nil {
			t.Errorf("RegisterBroker(%+v) accepted", req)
		}
	}
}
