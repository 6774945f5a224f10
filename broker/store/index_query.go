package store

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/sluicemq/sluice/message"
)

// Query limits (RocketMQ MessageStoreConfig).
const (
	// DefaultQueryMaxNum is the number of messages a unique-key query returns at most: 32
	// (RocketMQ defaultQueryMaxNum; QUERY_MESSAGE with _UNIQUE_KEY_QUERY=true uses it).
	DefaultQueryMaxNum = 32
	// MaxQueryMaxNum caps IndexQuery.MaxNum: 64 (RocketMQ maxMsgsNumBatch).
	MaxQueryMaxNum = 64
	// MaxQueryBytes caps the records one query returns: 8 MiB (at least one record is
	// returned), so a QUERY_MESSAGE response stays well under the 16 MiB frame limit.
	MaxQueryBytes = 8 << 20
	// indexTimeSlackMs: a chain is walked from newest to oldest entry; the walk stops at an
	// entry stored this much (10 min) before the query's begin time. Entries of a chain are
	// in commitlog order, and store times follow it except for clock steps back.
	indexTimeSlackMs = 10 * 60 * 1000
)

// IndexQuery selects messages by key (QUERY_MESSAGE, RocketMQ request code 12).
type IndexQuery struct {
	// Topic is the topic the messages were stored under (required).
	Topic string
	// Key is a key of the KEYS property or a UNIQ_KEY (required; no spaces, since KEYS
	// separates keys with a space).
	Key string
	// UniqKey restricts the match to messages whose UNIQ_KEY is Key. Otherwise a message
	// matches when Key is one of its KEYS or its UNIQ_KEY (both are index keys).
	UniqKey bool
	// MaxNum is the most messages returned: 1..64, larger values are capped at 64
	// (MaxQueryMaxNum).
	MaxNum int
	// BeginTimestamp and EndTimestamp bound the store time, unix ms, both inclusive
	// (EndTimestamp >= BeginTimestamp).
	BeginTimestamp, EndTimestamp int64
}

// QueryResult is the answer to Query.
type QueryResult struct {
	// Messages are the matching messages (body as stored, not decompressed), at most
	// MaxNum, the newest ones, in commitlog order (oldest first).
	Messages []*message.MessageExt
	// Records holds the raw stored record (docs/protocol.md §4.1) of each message, in the same
	// order; concatenated they are the QUERY_MESSAGE response body.
	Records [][]byte
	// IndexLastUpdateTimestamp is the newest store time in the newest index file, unix ms
	// (0 when the index is empty): the QUERY_MESSAGE response's indexLastUpdateTimestamp.
	IndexLastUpdateTimestamp int64
	// IndexLastUpdatePhyOffset is the newest commitlog offset in the newest index file:
	// the response's indexLastUpdatePhyoffset.
	IndexLastUpdatePhyOffset int64
}

// validate checks q and applies the MaxNum cap.
func (q *IndexQuery) validate() error {
	if err := message.ValidateTopic(q.Topic); err != nil {
		return &InvalidArgumentError{Field: "topic", Reason: "not a valid topic name", Err: err}
	}
	switch {
	case q.Key == "":
		return &InvalidArgumentError{Field: "key", Reason: "empty"}
	case strings.IndexByte(q.Key, ' ') >= 0:
		return &InvalidArgumentError{Field: "key", Reason: fmt.Sprintf("%q contains a space, the KEYS separator, so no message can have it", q.Key)}
	case q.MaxNum < 1:
		return &InvalidArgumentError{Field: "maxNum", Reason: fmt.Sprintf("%d is below 1 (want 1..%d)", q.MaxNum, MaxQueryMaxNum)}
	case q.EndTimestamp < q.BeginTimestamp:
		return &InvalidArgumentError{Field: "endTimestamp", Reason: fmt.Sprintf("%d is before beginTimestamp %d", q.EndTimestamp, q.BeginTimestamp)}
	}
	q.MaxNum = min(q.MaxNum, MaxQueryMaxNum)
	return nil
}

// Query finds messages by key through the key index (see the package doc, "Key index").
// Index files are searched newest first, skipping files whose store-time range misses the
// query's; each candidate entry is checked against the record it points at (topic, key,
// store time), so hash collisions and stale entries never produce a wrong message, and
// records that retention deleted are skipped. At most MaxQueryBytes of records are
// returned (always at least one match).
//
// Errors: *InvalidArgumentError naming the bad field, ErrIndexDisabled, ErrClosed, or an
// I/O error. No match is not an error (empty Messages).
func (s *Store) Query(q IndexQuery) (QueryResult, error) {
	if err := q.validate(); err != nil {
		return QueryResult{}, err
	}
	if err := s.begin(); err != nil {
		return QueryResult{}, err
	}
	defer s.end()
	if s.index == nil {
		return QueryResult{}, ErrIndexDisabled
	}
	files := s.index.fileList()
	var res QueryResult
	for i := len(files) - 1; i >= 0; i-- {
		if f := files[i]; f.count.Load() > 0 {
			res.IndexLastUpdateTimestamp, res.IndexLastUpdatePhyOffset = f.maxTS.Load(), f.maxPhy.Load()
			break
		}
	}
	hash := keyHash(q.Topic, q.Key)
	seen := map[int64]bool{}
	bytes := 0
	full := func() bool { return len(res.Messages) >= q.MaxNum || bytes >= MaxQueryBytes }
	for i := len(files) - 1; i >= 0 && !full(); i-- {
		f := files[i]
		// File-level time filter (the file's exact store-time range).
		if f.count.Load() == 0 || f.maxTS.Load() < q.BeginTimestamp || f.minTS.Load() > q.EndTimestamp {
			continue
		}
		err := f.walk(hash, func(e indexEntry) (bool, error) {
			t := f.base + int64(e.delta)*1000 // t <= store time < t+1000
			if t+1000+indexTimeSlackMs <= q.BeginTimestamp {
				return true, nil // older than the range: the rest of the chain is older still
			}
			if t > q.EndTimestamp || t+1000 <= q.BeginTimestamp || seen[e.phy] || e.phy < s.cl.minOffset() {
				return false, nil
			}
			seen[e.phy] = true
			m, rec, err := s.lookMessage(e.phy)
			if errors.Is(err, ErrNotFound) {
				return false, nil // deleted or past the end: not a record to serve
			}
			if err != nil {
				return false, err
			}
			if !q.matches(m) {
				return false, nil // hash collision or a stale entry
			}
			res.Messages = append(res.Messages, m)
			res.Records = append(res.Records, rec)
			bytes += len(rec)
			return full(), nil
		})
		if err != nil {
			return QueryResult{}, err
		}
	}
	// Newest first so far: return them in commitlog order.
	for a, b := 0, len(res.Messages)-1; a < b; a, b = a+1, b-1 {
		res.Messages[a], res.Messages[b] = res.Messages[b], res.Messages[a]
		res.Records[a], res.Records[b] = res.Records[b], res.Records[a]
	}
	return res, nil
}

// matches checks a candidate record against the query.
func (q *IndexQuery) matches(m *message.MessageExt) bool {
	if m.Topic != q.Topic || m.StoreTimestamp < q.BeginTimestamp || m.StoreTimestamp > q.EndTimestamp {
		return false
	}
	if m.UniqKey() == q.Key {
		return true
	}
	if q.UniqKey {
		return false
	}
	for k := range strings.SplitSeq(m.Property(message.PropertyKeys), " ") {
		if k == q.Key {
			return true
		}
	}
	return false
}

// walk calls fn for each entry of the slot of hash whose keyHash is hash, newest first,
// until fn returns true or an error. A file deleted under the walk (retention) ends it
// quietly. The chain is bounded: entry numbers strictly decrease.
func (f *indexFile) walk(hash uint32, fn func(indexEntry) (bool, error)) error {
	v, err := f.slot(hash % f.slotCount)
	for err == nil && v >= 1 && v <= f.capacity {
		var e indexEntry
		if e, err = f.readEntry(v); err != nil {
			break
		}
		if e.hash == hash {
			stop, ferr := fn(e)
			if ferr != nil || stop {
				return ferr
			}
		}
		if e.prev >= v {
			return nil // corrupt link: never loop
		}
		v = e.prev
	}
	if err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("store: read index file %s: %w", f.path, err)
	}
	return nil
}

// QueryMessages returns up to maxNum messages (capped at 64) of topic whose KEYS contain
// key or whose UNIQ_KEY is key, stored between beginMs and endMs (unix ms, inclusive),
// with their raw records; see Query.
func (s *Store) QueryMessages(topic, key string, maxNum int, beginMs, endMs int64) ([]*message.MessageExt, [][]byte, error) {
	r, err := s.Query(IndexQuery{Topic: topic, Key: key, MaxNum: maxNum, BeginTimestamp: beginMs, EndTimestamp: endMs})
	return r.Messages, r.Records, err
}

// QueryByUniqKey returns the messages of topic whose UNIQ_KEY (the client message id) is
// uniq, at any store time, at most 32 (DefaultQueryMaxNum; normally one, more when a
// message was stored again, e.g. a retry), with their raw records; see Query.
func (s *Store) QueryByUniqKey(topic, uniq string) ([]*message.MessageExt, [][]byte, error) {
	r, err := s.Query(IndexQuery{Topic: topic, Key: uniq, UniqKey: true, MaxNum: DefaultQueryMaxNum, BeginTimestamp: 0, EndTimestamp: math.MaxInt64})
	return r.Messages, r.Records, err
}
