package broker

import (
	"context"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// Consumer offsets: the table of committed offsets and the requests that commit and
// read them or look up a queue's offsets (RESET_OFFSET: resetoffset.go).

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

// handleQueryOffset serves QUERY_CONSUMER_OFFSET (14). With no committed offset it
// answers QUERY_NOT_FOUND (22) and the client starts where its consumeFromWhere says.
// (Java answers 0 instead for a "young" queue whose first message is still in memory;
// Sluice leaves the choice to the client, so a new group with CONSUME_FROM_LAST_OFFSET
// always starts at the end.)
func (b *Broker) handleQueryOffset(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseConsumerOffsetHeader(req, false)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	off, ok := b.offsets.query(h.ConsumerGroup, h.Topic, h.QueueID)
	if !ok {
		return errResponse(remoting.QueryNotFound, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
	}
	return okResponse().SetExt("offset", strconv.FormatInt(off, 10))
}

// handleUpdateOffset serves UPDATE_CONSUMER_OFFSET (15).
func (b *Broker) handleUpdateOffset(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseConsumerOffsetHeader(req, true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	b.offsets.commit(h.ConsumerGroup, h.Topic, h.QueueID, h.CommitOffset)
	return okResponse()
}

// handleQueueOffset serves GET_MAX_OFFSET (30) and GET_MIN_OFFSET (31): ext "offset".
func (b *Broker) handleQueueOffset(get func(string, int32) int64) remoting.Handler {
	return func(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		h, err := wire.ParseQueueHeader(req, false)
		if err != nil {
			return errResponse(remoting.SystemError, "%v", err)
		}
		return okResponse().SetExt("offset", strconv.FormatInt(get(h.Topic, h.QueueID), 10))
	}
}

// handleSearchOffset serves SEARCH_OFFSET_BY_TIMESTAMP (29): ext "offset".
func (b *Broker) handleSearchOffset(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseQueueHeader(req, true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	return okResponse().SetExt("offset", strconv.FormatInt(b.store.OffsetByTimestamp(h.Topic, h.QueueID, h.Timestamp), 10))
}

// handleEarliestTime serves GET_EARLIEST_MSG_STORETIME (32): ext "timestamp" (ms).
func (b *Broker) handleEarliestTime(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseQueueHeader(req, false)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	ts, err := b.store.EarliestMessageTime(h.Topic, h.QueueID)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	return okResponse().SetExt("timestamp", strconv.FormatInt(ts, 10))
}

// handleGroupOffsets serves Sluice's GroupOffsets (request code 7003,
// wire.GroupOffsets): every committed offset of ext consumerGroup with each
// queue's min and max offsets.
func (b *Broker) handleGroupOffsets(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	group, err := req.ExtString("consumerGroup", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	body := wire.GroupOffsetsBody{Group: group, Queues: []wire.GroupQueueOffset{}}
	b.offsets.mu.Lock()
	for k, qs := range b.offsets.table {
		i := strings.LastIndexByte(k, '@')
		if i < 0 || k[i+1:] != group {
			continue
		}
		for q, off := range qs {
			body.Queues = append(body.Queues, wire.GroupQueueOffset{Topic: k[:i], QueueID: q, Committed: off})
		}
	}
	b.offsets.mu.Unlock()
	for i := range body.Queues {
		q := &body.Queues[i]
		q.Min, q.Max = b.store.MinOffset(q.Topic, q.QueueID), b.store.MaxOffset(q.Topic, q.QueueID)
	}
	sort.Slice(body.Queues, func(i, j int) bool {
		x, y := body.Queues[i], body.Queues[j]
		if x.Topic != y.Topic {
			return x.Topic < y.Topic
		}
		return x.QueueID < y.QueueID
	})
	return jsonResponse(body)
}
