package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// checkpoint is what the store knows to be on disk, written to <Dir>/checkpoint after the
// fsyncs it describes.
//
// File format (44 bytes, big-endian): "SLCP" magic, uint32 version 1,
// int64 commitLogFlushed, int64 commitLogFlushedTime (unix ms), int64 consumeQueueFlushed,
// int64 checkpointTime (unix ms), uint32 CRC32 (IEEE) of the preceding 40 bytes.
type checkpoint struct {
	// commitLogFlushed: every commitlog byte below this offset was fsynced.
	commitLogFlushed int64
	// commitLogFlushedTime: when that fsync finished, unix ms.
	commitLogFlushedTime int64
	// consumeQueueFlushed: every consume-queue entry of a record below this commitlog
	// offset was fsynced. Always <= commitLogFlushed. Recovery re-dispatches from here.
	consumeQueueFlushed int64
	// time: when the checkpoint was written, unix ms.
	time int64
}

const (
	checkpointMagic   = "SLCP"
	checkpointVersion = 1
	checkpointSize    = 44
	checkpointFile    = "checkpoint"
)

func (c checkpoint) marshal() []byte {
	b := make([]byte, 0, checkpointSize)
	b = append(b, checkpointMagic...)
	b = binary.BigEndian.AppendUint32(b, checkpointVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(c.commitLogFlushed))
	b = binary.BigEndian.AppendUint64(b, uint64(c.commitLogFlushedTime))
	b = binary.BigEndian.AppendUint64(b, uint64(c.consumeQueueFlushed))
	b = binary.BigEndian.AppendUint64(b, uint64(c.time))
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

var errBadCheckpoint = errors.New("store: bad checkpoint")

func unmarshalCheckpoint(b []byte) (checkpoint, error) {
	if len(b) != checkpointSize || string(b[:4]) != checkpointMagic {
		return checkpoint{}, fmt.Errorf("%w: size %d or magic", errBadCheckpoint, len(b))
	}
	if crc32.ChecksumIEEE(b[:40]) != binary.BigEndian.Uint32(b[40:]) {
		return checkpoint{}, fmt.Errorf("%w: crc mismatch", errBadCheckpoint)
	}
	if v := binary.BigEndian.Uint32(b[4:]); v != checkpointVersion {
		return checkpoint{}, fmt.Errorf("%w: version %d", errBadCheckpoint, v)
	}
	c := checkpoint{
		commitLogFlushed:     int64(binary.BigEndian.Uint64(b[8:])),
		commitLogFlushedTime: int64(binary.BigEndian.Uint64(b[16:])),
		consumeQueueFlushed:  int64(binary.BigEndian.Uint64(b[24:])),
		time:                 int64(binary.BigEndian.Uint64(b[32:])),
	}
	if c.commitLogFlushed < 0 || c.consumeQueueFlushed < 0 || c.consumeQueueFlushed > c.commitLogFlushed {
		return checkpoint{}, fmt.Errorf("%w: inconsistent offsets", errBadCheckpoint)
	}
	return c, nil
}

// readCheckpoint reads <dir>/checkpoint. A missing file returns ok=false and no error.
func readCheckpoint(dir string) (c checkpoint, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return checkpoint{}, false, nil
	}
	if err != nil {
		return checkpoint{}, false, fmt.Errorf("store: read checkpoint: %w", err)
	}
	c, err = unmarshalCheckpoint(b)
	if err != nil {
		return checkpoint{}, false, err
	}
	return c, true, nil
}

// writeCheckpoint replaces <dir>/checkpoint atomically: write a temp file, fsync it, rename it
// over the old one, fsync the directory.
func writeCheckpoint(dir string, c checkpoint) error {
	tmp := filepath.Join(dir, checkpointFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("store: write checkpoint: %w", err)
	}
	if _, err := f.Write(c.marshal()); err != nil {
		f.Close()
		return fmt.Errorf("store: write checkpoint: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("store: fsync checkpoint: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("store: write checkpoint: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, checkpointFile)); err != nil {
		return fmt.Errorf("store: rename checkpoint: %w", err)
	}
	return syncDir(dir)
}
