package broker

import (
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
)

// Perm bits (Java PermName).
const (
	permInherit = wire.PermInherit
	permWrite   = wire.PermWrite
	permRead    = wire.PermRead
)

// topicTable holds the broker's topic configs and persists them to
// <root>/config/topics.json in Java's TopicConfigManager layout. Every change bumps the
// data version and calls onChange (the broker re-registers with the name servers).
type topicTable struct {
	path     string
	onChange func()

	mu      sync.RWMutex
	topics  map[string]*wire.TopicConfig
	version wire.DataVersion
	// changed names the topics put or created since the last takeChanged, the
	// registration after a topic change sends only these (see takeChanged); changedAll
	// asks for the whole table instead (after a removal, or a failed registration).
	changed    map[string]struct{}
	changedAll bool
	dropped    int // topics of the file with invalid names, left out at load
	writer     *configWriter
}

type topicsFile struct {
	TopicConfigTable map[string]*wire.TopicConfig `json:"topicConfigTable"`
	DataVersion      wire.DataVersion             `json:"dataVersion"`
}

func newTopicTable(root string, cfg *Config) (*topicTable, error) {
	t := &topicTable{path: filepath.Join(root, "config", "topics.json"), topics: map[string]*wire.TopicConfig{}}
	var f topicsFile
	if err := readJSONFile(t.path, &f); err != nil {
		return nil, err
	}
	for name, tc := range f.TopicConfigTable {
		// Names that break the rules (left by an older version that did not check them)
		// are dropped: they could never be registered or used.
		if tc == nil || message.ValidateTopic(name) != nil {
			t.dropped++
			continue
		}
		t.topics[name] = tc
	}
	t.version = f.DataVersion
	t.writer = newConfigWriter("topics.json", t.path, t.fileSnapshot)
	// System topics, as Java's TopicConfigManager creates them at start.
	if boolOr(cfg.AutoCreateTopicEnable, true) {
		t.topics[message.AutoCreateTopicKey] = &wire.TopicConfig{TopicName: message.AutoCreateTopicKey,
			ReadQueueNums: cfg.DefaultTopicQueueNums, WriteQueueNums: cfg.DefaultTopicQueueNums,
			Perm: permInherit | permRead | permWrite, TopicFilterType: "SINGLE_TAG"}
	} else {
		delete(t.topics, message.AutoCreateTopicKey)
	}
	levels, _ := message.ParseDelayLevels(cfg.MessageDelayLevel)
	t.putSystem(message.ScheduleTopic, len(levels))
	t.putSystem(message.TransHalfTopic, 1)
	t.putSystem(message.TransOpHalfTopic, 1)
	t.putSystem(cfg.BrokerClusterName, 16)
	t.putSystem(cfg.BrokerName, 1)
	return t, nil
}

func (t *topicTable) putSystem(name string, queues int) {
	if _, ok := t.topics[name]; ok {
		return
	}
	t.topics[name] = &wire.TopicConfig{TopicName: name, ReadQueueNums: queues, WriteQueueNums: queues,
		Perm: permRead | permWrite, TopicFilterType: "SINGLE_TAG"}
}

// get returns the topic's config, or nil. The table never changes a config it holds
// (put and getOrCreate store new ones), so the result is shared, not copied: a send
// looks its topic up without an allocation. Callers must not modify it.
func (t *topicTable) get(name string) *wire.TopicConfig {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.topics[name]
}

// put creates or replaces a topic config and persists the table.
func (t *topicTable) put(tc wire.TopicConfig) error {
	t.mu.Lock()
	c := tc
	t.topics[tc.TopicName] = &c
	t.markChangedLocked(tc.TopicName)
	err := t.persistLocked()
	t.mu.Unlock()
	if t.onChange != nil {
		t.onChange()
	}
	return err
}

// getOrCreate returns the topic's config (shared, as get's: not to be modified),
// creating it from create() when missing. The bool reports whether it was created.
func (t *topicTable) getOrCreate(name string, create func() *wire.TopicConfig) (*wire.TopicConfig, bool, error) {
	if tc := t.get(name); tc != nil {
		return tc, false, nil
	}
	t.mu.Lock()
	if tc, ok := t.topics[name]; ok {
		t.mu.Unlock()
		return tc, false, nil
	}
	tc := create()
	if tc == nil {
		t.mu.Unlock()
		return nil, false, nil
	}
	t.topics[name] = tc
	t.markChangedLocked(name)
	err := t.persistLocked()
	t.mu.Unlock()
	if t.onChange != nil {
		t.onChange()
	}
	return tc, true, err
}

func (t *topicTable) remove(name string) error {
	t.mu.Lock()
	delete(t.topics, name)
	t.changedAll = true
	err := t.persistLocked()
	t.mu.Unlock()
	if t.onChange != nil {
		t.onChange()
	}
	return err
}

// persistLocked bumps the data version and schedules a write of the table (see
// configWriter); it does not wait for the disk.
func (t *topicTable) persistLocked() error {
	t.version.Counter++
	t.version.Timestamp = time.Now().UnixMilli()
	t.writer.markDirty()
	return nil
}

// fileSnapshot returns the file form of the table (configs are replaced, never changed
// in place, so a shallow copy is consistent).
func (t *topicTable) fileSnapshot() any {
	t.mu.RLock()
	defer t.mu.RUnlock()
	f := topicsFile{TopicConfigTable: make(map[string]*wire.TopicConfig, len(t.topics)), DataVersion: t.version}
	for k, v := range t.topics {
		f.TopicConfigTable[k] = v
	}
	return f
}

// markChangedLocked records that topic name was put or created (t.mu held).
func (t *topicTable) markChangedLocked(name string) {
	if t.changed == nil {
		t.changed = make(map[string]struct{})
	}
	t.changed[name] = struct{}{}
}

// takeChanged returns copies of the configs changed since the last call and the data
// version, for the registration that follows a topic change (as Java's
// registerIncrementBrokerData: a name server adds or updates the topics a registration
// carries and leaves the others as they are, so the body need not hold the whole table;
// with 10,000 topics the whole table is about 1.5 MB to encode and decode per created
// topic). all is true, with the whole table, after a removal or markAllChanged, or when
// more than half of the table changed. Nothing changed: nil, false.
func (t *topicTable) takeChanged() (topics map[string]*wire.TopicConfig, version wire.DataVersion, all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	all = t.changedAll || len(t.changed) > len(t.topics)/2
	if !all && len(t.changed) == 0 {
		return nil, t.version, false
	}
	src := t.changed
	if all {
		src = nil
	}
	out := make(map[string]*wire.TopicConfig, len(src))
	if all {
		for k, v := range t.topics {
			c := *v
			out[k] = &c
		}
	} else {
		for k := range src {
			if v := t.topics[k]; v != nil {
				c := *v
				out[k] = &c
			}
		}
	}
	t.changed, t.changedAll = nil, false
	return out, t.version, all
}

// currentVersion returns the table's data version.
func (t *topicTable) currentVersion() wire.DataVersion {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.version
}

// markAllChanged makes the next takeChanged return the whole table (a registration
// with part of the changes failed: the next one must not leave them out).
func (t *topicTable) markAllChanged() {
	t.mu.Lock()
	t.changedAll = true
	t.mu.Unlock()
}

// snapshot returns copies of all configs and the data version, for registration.
func (t *topicTable) snapshot() (map[string]*wire.TopicConfig, wire.DataVersion) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[string]*wire.TopicConfig, len(t.topics))
	for k, v := range t.topics {
		c := *v
		out[k] = &c
	}
	return out, t.version
}

// names returns the sorted topic names.
func (t *topicTable) names() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]string, 0, len(t.topics))
	for k := range t.topics {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
