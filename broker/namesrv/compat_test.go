package namesrv_test

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"testing"

	rmqadmin "github.com/apache/rocketmq-client-go/v2/admin"
	rmqerrors "github.com/apache/rocketmq-client-go/v2/errors"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/internal/wire"
)

// officialClientLeakOptions lists goroutines the official client starts at package
// init, which are not ours to stop: a go-cache janitor created by a package-level
// cache.New in rocketmq-client-go/v2/internal (started from goroutine 1).
func officialClientLeakOptions() []goleak.Option {
	return []goleak.Option{goleak.IgnoreTopFunction("github.com/patrickmn/go-cache.(*janitor).Run")}
}

type silentLogger struct{}

func (silentLogger) Debug(string, map[string]interface{})   {}
func (silentLogger) Info(string, map[string]interface{})    {}
func (silentLogger) Warning(string, map[string]interface{}) {}
func (silentLogger) Error(string, map[string]interface{})   {}
func (silentLogger) Fatal(string, map[string]interface{})   {}
func (silentLogger) Level(string)                           {}
func (silentLogger) OutputPath(string) error                { return nil }

type mq struct {
	broker string
	id     int
}

func mqs(in []*primitive.MessageQueue) []mq {
	out := make([]mq, 0, len(in))
	for _, q := range in {
		out = append(out, mq{q.BrokerName, q.QueueId})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].broker != out[j].broker {
			return out[i].broker < out[j].broker
		}
		return out[i].id < out[j].id
	})
	return out
}

// TestOfficialGoClientReadsRoutes runs the official RocketMQ Go client's admin against
// our name server, with brokers registered over REGISTER_BROKER by the test. The
// admin's FetchPublishMessageQueues decodes the route exactly like its producer does
// (jsoniter queueDatas, gjson + hand-split brokerAddrs, orderTopicConf override).
func TestOfficialGoClientReadsRoutes(t *testing.T) {
	rlog.SetLogger(silentLogger{})
	ns := startNS(t, namesrv.Config{})
	c := newClient(t)
	register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10911", 0, topics(1, topic("T", 4, 6), topic("O", 4, 6), topic("RO", 2, 4)))
	register(t, c, ns.Addr(), "broker-a", "127.0.0.1:10912", 1, topics(1))
	register(t, c, ns.Addr(), "broker-b", "127.0.0.1:10921", 0, topics(1, topic("T", 2, 6), topic("O", 4, 6)))
	// broker-c has only a slave for T: producers must not use it.
	register(t, c, ns.Addr(), "broker-c", "127.0.0.1:10931", 0, topics(1, topic("T", 3, 6)))
	register(t, c, ns.Addr(), "broker-c", "127.0.0.1:10932", 1, topics(1))
	if err := wire.UnregisterBroker(ctx(t), c, ns.Addr(), wire.UnregisterBrokerRequest{
		ClusterName: "DefaultCluster", BrokerName: "broker-c", BrokerAddr: "127.0.0.1:10931"}); err != nil {
		t.Fatal(err)
	}
	if err := wire.PutKVConfig(ctx(t), c, ns.Addr(), wire.NamespaceOrderTopicConfig, "O", "broker-b:2;broker-a:1"); err != nil {
		t.Fatal(err)
	}

	adm, err := rmqadmin.NewAdmin(rmqadmin.WithResolver(primitive.NewPassthroughResolver([]string{ns.Addr()})))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	bg := context.Background()

	got, err := adm.FetchPublishMessageQueues(bg, "T")
	if err != nil {
		t.Fatalf("official FetchPublishMessageQueues(T): %v", err)
	}
	want := []mq{{"broker-a", 0}, {"broker-a", 1}, {"broker-a", 2}, {"broker-a", 3}, {"broker-b", 0}, {"broker-b", 1}}
	if !reflect.DeepEqual(mqs(got), want) {
		t.Errorf("official client publish queues of T = %v, want %v", mqs(got), want)
	}

	got, err = adm.FetchPublishMessageQueues(bg, "O")
	if err != nil {
		t.Fatalf("official FetchPublishMessageQueues(O): %v", err)
	}
	// orderTopicConf overrides queueDatas, in its own order.
	wantO := []mq{{"broker-b", 0}, {"broker-b", 1}, {"broker-a", 0}}
	var gotO []mq
	for _, q := range got {
		gotO = append(gotO, mq{q.BrokerName, q.QueueId})
	}
	if !reflect.DeepEqual(gotO, wantO) {
		t.Errorf("official client publish queues of ordered O = %v, want %v", gotO, wantO)
	}

	// Read-only topic: no publish queues.
	if got, err = adm.FetchPublishMessageQueues(bg, "RO"); err != nil || len(got) != 0 {
		t.Errorf("read-only topic publish queues = %v %v", mqs(got), err)
	}

	clusters, err := adm.FetchClusterList("T")
	if err != nil || !reflect.DeepEqual(clusters, []string{"DefaultCluster"}) {
		t.Errorf("official FetchClusterList = %v %v", clusters, err)
	}

	list, err := adm.FetchAllTopicList(bg)
	if err != nil {
		t.Fatalf("official FetchAllTopicList: %v", err)
	}
	sort.Strings(list.TopicList)
	if !reflect.DeepEqual(list.TopicList, []string{"O", "RO", "T"}) {
		t.Errorf("official topic list = %v", list.TopicList)
	}

	if _, err := adm.FetchPublishMessageQueues(bg, "missing"); !errors.Is(err, rmqerrors.ErrTopicNotExist) {
		t.Errorf("official client on unknown topic: err = %v, want its ErrTopicNotExist", err)
	}
}
