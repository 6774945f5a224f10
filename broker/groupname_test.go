package broker

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// TestHeartbeatLongGroupNamesItsRule: a 121-byte consumer group subscribing (as every
// clustering consumer does) to its own %RETRY% topic is refused with the group's rule —
// the field consumerDataSet.groupName and the 120-byte limit — not with the 128-byte
// retry topic's length the user never typed.
func TestHeartbeatLongGroupNamesItsRule(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	group := strings.Repeat("g", 121)
	hb, _ := json.Marshal(wire.HeartbeatData{ClientID: "c1", ConsumerDataSet: []wire.ConsumerData{{GroupName: group,
		MessageModel: "CLUSTERING", SubscriptionDataSet: []wire.SubscriptionData{{Topic: "T", SubString: "*"}, {Topic: "%RETRY%" + group, SubString: "*"}}}}})
	r := invoke(t, c, b.Addr(), remoting.NewRequest(remoting.HeartBeat, nil, hb))
	if r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "consumerDataSet.groupName") || !strings.Contains(r.Remark, "limit 120") ||
		strings.Contains(r.Remark, "subscriptionDataSet.topic") {
		t.Fatalf("code %d remark %.300q", r.Code, r.Remark)
	}
	if len(b.groups.snapshot().SubscriptionGroupTable) != 0 || slices.Contains(b.topics.names(), "%RETRY%"+group) {
		t.Fatal("the group or its retry topic was saved")
	}
}
