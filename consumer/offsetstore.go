package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/sluicemq/sluice/internal/atomicfile"
	"github.com/sluicemq/sluice/message"
)

// offsetStore keeps a consumer group's offsets: on the brokers in clustering mode, in a
// local file in broadcasting mode.
type offsetStore interface {
	// read returns the stored offset of mq, -1 when there is none.
	read(ctx context.Context, mq message.MessageQueue) (int64, error)
	// update stores offset for mq (remote: UPDATE_CONSUMER_OFFSET now; local: in memory
	// until flush).
	update(ctx context.Context, mq message.MessageQueue, offset int64) error
	// flush makes the updates durable (local: writes the file if anything changed).
	flush() error
	// close releases the store (local: frees the file for another consumer).
	close()
}

// remoteOffsets stores offsets on the brokers (QUERY_CONSUMER_OFFSET /
// UPDATE_CONSUMER_OFFSET, request codes 14 and 15).
type remoteOffsets struct{ b *brokerAPI }

func (r remoteOffsets) read(ctx context.Context, mq message.MessageQueue) (int64, error) {
	return r.b.queryOffset(ctx, mq)
}

func (r remoteOffsets) update(ctx context.Context, mq message.MessageQueue, offset int64) error {
	return r.b.updateOffset(ctx, mq, offset)
}

func (remoteOffsets) flush() error { return nil }
func (remoteOffsets) close()       {}

// ErrOffsetFileInUse is returned by PushConsumer.Start when another broadcasting
// consumer of this process already uses the same offset file (same OffsetStoreDir,
// Group and InstanceName).
var ErrOffsetFileInUse = errors.New("consumer: broadcasting offset file already in use by another consumer of this process")

// openOffsetFiles holds the offset files in use in this process: two consumers writing
// one file would undo each other's progress.
var openOffsetFiles sync.Map // path → struct{}

// localOffsets stores a broadcasting consumer's offsets in a JSON file:
// {"offsetTable":[{"topic":..,"brokerName":..,"queueId":n,"offset":m},...]}.
type localOffsets struct {
	path string

	mu    sync.Mutex
	table map[message.MessageQueue]int64
	dirty bool
	wmu   sync.Mutex // serializes file writes
}

type offsetFileEntry struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int    `json:"queueId"`
	Offset     int64  `json:"offset"`
}

type offsetFile struct {
	OffsetTable []offsetFileEntry `json:"offsetTable"`
}

// offsetFilePath returns <dir>/<group>/<instance or DEFAULT>/offsets.json, dir
// defaulting to $HOME/.sluice/offsets.
func offsetFilePath(dir, group, instance string) (string, error) {
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("consumer: Config.OffsetStoreDir is empty and the home directory is unknown: %w", err)
		}
		dir = filepath.Join(home, ".sluice", "offsets")
	}
	if instance == "" {
		instance = "DEFAULT"
	}
	return filepath.Join(dir, group, instance, "offsets.json"), nil
}

// openLocalOffsets claims path for this process and loads it (a missing file is an
// empty table). Errors: ErrOffsetFileInUse, or a read/parse error naming the file.
func openLocalOffsets(path string) (*localOffsets, error) {
	if _, loaded := openOffsetFiles.LoadOrStore(path, struct{}{}); loaded {
		return nil, fmt.Errorf("%w: %s", ErrOffsetFileInUse, path)
	}
	l := &localOffsets{path: path, table: map[message.MessageQueue]int64{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return l, nil
	case err != nil:
		openOffsetFiles.Delete(path)
		return nil, fmt.Errorf("consumer: read offset file: %w", err)
	}
	var f offsetFile
	if err := json.Unmarshal(b, &f); err != nil {
		openOffsetFiles.Delete(path)
		return nil, fmt.Errorf("consumer: offset file %s is not valid JSON: %w", path, err)
	}
	for _, e := range f.OffsetTable {
		if e.Offset >= 0 {
			l.table[message.MessageQueue{Topic: e.Topic, BrokerName: e.BrokerName, QueueID: e.QueueID}] = e.Offset
		}
	}
	return l, nil
}

func (l *localOffsets) read(_ context.Context, mq message.MessageQueue) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off, ok := l.table[mq]; ok {
		return off, nil
	}
	return -1, nil
}

func (l *localOffsets) update(_ context.Context, mq message.MessageQueue, offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.table[mq]; !ok || cur != offset {
		l.table[mq] = offset
		l.dirty = true
	}
	return nil
}

// flush writes the table atomically: a temporary file in the same directory, fsync,
// rename over the old file, fsync of the directory.
func (l *localOffsets) flush() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	if !l.dirty {
		l.mu.Unlock()
		return nil
	}
	f := offsetFile{OffsetTable: make([]offsetFileEntry, 0, len(l.table))}
	for mq, off := range l.table {
		f.OffsetTable = append(f.OffsetTable, offsetFileEntry{Topic: mq.Topic, BrokerName: mq.BrokerName, QueueID: mq.QueueID, Offset: off})
	}
	l.dirty = false
	l.mu.Unlock()
	sort.Slice(f.OffsetTable, func(i, j int) bool {
		a, b := f.OffsetTable[i], f.OffsetTable[j]
		return message.MessageQueue{Topic: a.Topic, BrokerName: a.BrokerName, QueueID: a.QueueID}.Less(
			message.MessageQueue{Topic: b.Topic, BrokerName: b.BrokerName, QueueID: b.QueueID})
	})
	if err := writeFileAtomic(l.path, f); err != nil {
		l.mu.Lock()
		l.dirty = true
		l.mu.Unlock()
		return err
	}
	return nil
}

func (l *localOffsets) close() { openOffsetFiles.Delete(l.path) }

func writeFileAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, b); err != nil {
		return fmt.Errorf("consumer: write offset file: %w", err)
	}
	return nil
}
