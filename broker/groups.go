package broker

import (
	"path/filepath"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
)

// SubscriptionGroupConfig is a consumer group's broker-side settings (Java
// SubscriptionGroupConfig; returned by GET_ALL_SUBSCRIPTIONGROUP_CONFIG, RocketMQ request
// code 201).
type SubscriptionGroupConfig struct {
	GroupName                      string `json:"groupName"`
	ConsumeEnable                  bool   `json:"consumeEnable"`                  // default true
	ConsumeFromMinEnable           bool   `json:"consumeFromMinEnable"`           // default true
	ConsumeBroadcastEnable         bool   `json:"consumeBroadcastEnable"`         // default true
	RetryQueueNums                 int    `json:"retryQueueNums"`                 // queues of %RETRY%<group>, default 1
	RetryMaxTimes                  int    `json:"retryMaxTimes"`                  // consume retries before the DLQ, default 16
	BrokerID                       int64  `json:"brokerId"`                       // default 0
	WhichBrokerWhenConsumeSlowly   int64  `json:"whichBrokerWhenConsumeSlowly"`   // default 1
	NotifyConsumerIdsChangedEnable bool   `json:"notifyConsumerIdsChangedEnable"` // default true
}

func newGroupConfig(name string) *SubscriptionGroupConfig {
	return &SubscriptionGroupConfig{GroupName: name, ConsumeEnable: true, ConsumeFromMinEnable: true,
		ConsumeBroadcastEnable: true, RetryQueueNums: 1, RetryMaxTimes: 16, WhichBrokerWhenConsumeSlowly: 1,
		NotifyConsumerIdsChangedEnable: true}
}

// groupTable holds subscription group configs, persisted to
// <root>/config/subscriptionGroup.json (Java SubscriptionGroupManager layout).
type groupTable struct {
	path       string
	autoCreate bool

	mu      sync.RWMutex
	groups  map[string]*SubscriptionGroupConfig
	version wire.DataVersion
	dropped int // groups of the file with invalid names, left out at load
	writer  *configWriter
}

type groupsFile struct {
	SubscriptionGroupTable map[string]*SubscriptionGroupConfig `json:"subscriptionGroupTable"`
	DataVersion            wire.DataVersion                    `json:"dataVersion"`
}

func newGroupTable(root string, autoCreate bool) (*groupTable, error) {
	g := &groupTable{path: filepath.Join(root, "config", "subscriptionGroup.json"), autoCreate: autoCreate,
		groups: map[string]*SubscriptionGroupConfig{}}
	var f groupsFile
	if err := readJSONFile(g.path, &f); err != nil {
		return nil, err
	}
	for k, v := range f.SubscriptionGroupTable {
		if v == nil || message.ValidateGroupTopics(k) != nil {
			g.dropped++ // an invalid name left by an older version
			continue
		}
		g.groups[k] = v
	}
	g.version = f.DataVersion
	g.writer = newConfigWriter("subscriptionGroup.json", g.path, func() any { return g.snapshot() })
	return g, nil
}

// find returns a copy of the group's config, creating it when auto-create is on; nil when
// the group is unknown and may not be created.
func (g *groupTable) find(name string) *SubscriptionGroupConfig {
	g.mu.RLock()
	c, ok := g.groups[name]
	g.mu.RUnlock()
	if ok {
		cp := *c
		return &cp
	}
	if !g.autoCreate || message.ValidateGroupTopics(name) != nil {
		return nil // never create a group whose %RETRY%/%DLQ% topics would be invalid
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.groups[name]; ok {
		cp := *c
		return &cp
	}
	c = newGroupConfig(name)
	g.groups[name] = c
	g.version.Counter++
	g.version.Timestamp = time.Now().UnixMilli()
	g.writer.markDirty()
	cp := *c
	return &cp
}

// snapshot returns the file form of the table.
func (g *groupTable) snapshot() groupsFile {
	g.mu.RLock()
	defer g.mu.RUnlock()
	f := groupsFile{SubscriptionGroupTable: make(map[string]*SubscriptionGroupConfig, len(g.groups)), DataVersion: g.version}
	for k, v := range g.groups {
		cp := *v
		f.SubscriptionGroupTable[k] = &cp
	}
	return f
}

// remove deletes a group's config; it reports whether there was one.
func (g *groupTable) remove(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.groups[name]; !ok {
		return false
	}
	delete(g.groups, name)
	g.version.Counter++
	g.version.Timestamp = time.Now().UnixMilli()
	g.writer.markDirty()
	return true
}
