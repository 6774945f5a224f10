package broker

import (
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// offsetTable holds committed consumer offsets, keyed "topic@group" then queue id, as
// Java's ConsumerOffsetManager does, and persists them to <root>/config/consumerOffset.json.
type offsetTable struct {
	path string

	mu    sync.Mutex
	table map[string]map[int32]int64
	dirty bool
}

type offsetsFile struct {
	OffsetTable map[string]map[string]int64 `json:"offsetTable"`
}

func newOffsetTable(root string) (*offsetTable, error) {
	o := &offsetTable{path: filepath.Join(root, "config", "consumerOffset.json"), table: map[string]map[int32]int64{}}
	var f offsetsFile
	if err := readJSONFile(o.path, &f); err != nil {
		return nil, err
	}
	for key, qs := range f.OffsetTable {
		m := map[int32]int64{}
		for q, off := range qs {
			id, err := strconv.ParseInt(q, 10, 32)
			if err != nil {
				continue
			}
			m[int32(id)] = off
		}
		o.table[key] = m
	}
	return o, nil
}

func offsetKey(topic, group string) string { return topic + "@" + group }

// commit stores a group's offset for a queue.
func (o *offsetTable) commit(group, topic string, queueID int32, offset int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := offsetKey(topic, group)
	m := o.table[k]
	if m == nil {
		m = map[int32]int64{}
		o.table[k] = m
	}
	if cur, ok := m[queueID]; !ok || cur != offset {
		m[queueID] = offset
		o.dirty = true
	}
}

// query returns the committed offset and whether one exists.
func (o *offsetTable) query(group, topic string, queueID int32) (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	off, ok := o.table[offsetKey(topic, group)][queueID]
	return off, ok
}

// removeTopic drops every group's offsets of a topic.
func (o *offsetTable) removeTopic(topic string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.table {
		if strings.HasPrefix(k, topic+"@") {
			delete(o.table, k)
			o.dirty = true
		}
	}
}

// groupOffsets returns a copy of all offsets of group, keyed by topic then queue id.
func (o *offsetTable) groupOffsets(group string) map[string]map[int32]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]map[int32]int64{}
	for k, qs := range o.table {
		i := strings.LastIndexByte(k, '@')
		if i < 0 || k[i+1:] != group {
			continue
		}
		m := map[int32]int64{}
		for q, off := range qs {
			m[q] = off
		}
		out[k[:i]] = m
	}
	return out
}

// persist writes the table if it changed since the last write.
func (o *offsetTable) persist() error {
	o.mu.Lock()
	if !o.dirty {
		o.mu.Unlock()
		return nil
	}
	f := offsetsFile{OffsetTable: make(map[string]map[string]int64, len(o.table))}
	for k, qs := range o.table {
		m := make(map[string]int64, len(qs))
		for q, off := range qs {
			m[strconv.Itoa(int(q))] = off
		}
		f.OffsetTable[k] = m
	}
	o.dirty = false
	o.mu.Unlock()
	if err := writeJSONFile(o.path, f); err != nil {
		o.mu.Lock()
		o.dirty = true
		o.mu.Unlock()
		return err
	}
	return nil
}

// removeGroup drops every offset of group; it reports whether there was one.
func (o *offsetTable) removeGroup(group string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	removed := false
	for k := range o.table {
		if i := strings.LastIndexByte(k, '@'); i >= 0 && k[i+1:] == group {
			delete(o.table, k)
			o.dirty, removed = true, true
		}
	}
	return removed
}
