// Package store is Sluice's message store: a RocketMQ-style commitlog with one consume
// queue per topic and queue id, group commit, a checkpoint and crash recovery.
//
// # Layout on disk
//
//	<Dir>/lock                                   flock(2) so that one process owns the directory
//	<Dir>/checkpoint                             flushed positions, written atomically (temp file + rename, CRC32)
//	<Dir>/commitlog/00000000000000000000         commitlog segment starting at byte 0
//	<Dir>/commitlog/00000000001073741824         next segment (name = its start offset, 20 digits)
//	<Dir>/consumequeue/<topic>/<queueId>/00000000000000000000   consume-queue file (name = byte offset of its first entry)
//	<Dir>/index/20240102030405006                key index file (name = creation time, UTC, yyyyMMddHHmmssSSS)
//
// The commitlog is the single source of truth. Every message of every topic is appended to it
// as a stored record (docs/protocol.md §4.1, built by [message.AppendRecord]) in segment files of
// [Config.CommitLogSegmentSize] bytes, preallocated with Truncate. When a record (plus 8 bytes)
// does not fit in the space left in a segment, the rest of the segment gets a blank filler
// ([int32 remaining][message.BlankMagicCode]) and the record starts the next segment, so a
// record never spans two files.
//
// A consume queue is an index of one topic/queue id: fixed 20-byte entries (commitlog offset
// int64, record size int32, tags code int64; docs/protocol.md §6.1), one per message, in files of
// [Config.ConsumeQueueEntries] entries. Entry n is the message with queue offset n, so a
// pull at an offset is a seek into the consume queue followed by a read of the commitlog.
//
// # Write path
//
// [Store.PutMessage] encodes the record outside any lock, then, holding the single writer
// lock, assigns the commitlog offset (the write position, rolling to a new segment if
// needed), the queue offset (the consume queue's next entry) and the store timestamp, patches
// those three fields into the encoded bytes, copies the record into a shared memory mapping
// of the segment being filled (on Linux, for writes under 16 KiB with ASYNC_FLUSH; pwrite for
// larger batches, where a page fault per fresh page costs more than the system call, with
// SYNC_FLUSH, where every group commit's fsync cleans the page being filled and the next
// copy would fault on it again, elsewhere, or when mapping fails; pages behind the writer
// are released from the process every 8 MiB, so the resident set does not grow; pages
// ahead of it are faulted in by a goroutine of its own, 4 MiB ahead, so that the copy,
// which runs on the sending connection's reader, does not take the fault of a fresh page),
// appends the consume-queue entry the same way, by a copy into
// a shared mapping of the consume-queue file being filled (no system call per put; at most
// 256 files are mapped at once, least recently written ones unmapped first, and with more
// busy queues than that a file is mapped again only after 64 pwrites; pages behind the
// writer are released every 16 KiB; pwrite where mapping fails or outside Linux), and only
// then publishes the new write position and queue length. Readers never look past the
// published positions, so a half-written record or entry is never served, and since the
// mappings share the files' page cache, reads (pread) see new data before any fsync, fsync
// of a file writes it back, and a crashed process loses none of it. A write through a
// mapping that faults (the file system cannot back the page: disk full, I/O error) is
// redone with pwrite, which returns the file system's error (ENOSPC becomes
// [ErrDiskFull]), and that file is written with pwrite from then on. A write that fails
// leaves nothing behind: the bytes of its records (a file system that runs out of space
// part-way takes the first pages) and the consume-queue entries already written for it are
// zeroed before the error is returned, so that recovery, which reads records and entries
// on until the first invalid or empty one, never takes them for stored messages (a later
// record of the same size, written at the same offset, would end where a stale one begins).
//
// [Store.PutGroup] runs the same path for many messages at once, of any topics and queues
// (the broker hands it a burst of sends read together from one connection): one lock hold,
// the records that fit the current segment written with one pwrite (which fills fresh
// page-cache pages without zeroing them first, unlike a fault through the mapping or the
// prefaulter), each queue's entries appended together, and one publication per segment
// written. A group of one (a client with one send in flight) is copied through the
// mapping as PutMessage's record is, unless the group before it had several records: the
// prefaulter would then zero-fill, ahead of that one copy, the pages the next groups write. A message that cannot be stored (too large, a bad
// topic) fails alone; a failed write fails the messages not yet written.
// Half messages and rolled-back transactional messages (transaction type PREPARED or
// ROLLBACK in the sysflag) are written to the commitlog only: they get queue offset 0 and no
// consume-queue entry (docs/protocol.md §4.2). After the lock is released, the [Store.OnDispatch]
// hooks run, which is how the broker wakes long-polling pulls.
//
// # Flushing and group commit
//
// With ASYNC_FLUSH a background goroutine fsyncs the commitlog every [Config.FlushInterval]
// and PutMessage returns as soon as the record is in the page cache: a process crash (kill -9)
// loses nothing, a power failure may lose the last interval.
//
// With SYNC_FLUSH PutMessage waits until the commitlog is fsynced up to the end of its record.
// Waiters do not fsync themselves: they wake the flush goroutine and wait on a channel that is
// closed after the next fsync. While one fsync runs, later puts pile up behind it and the next
// fsync covers all of them — group commit: N concurrent puts cost far fewer than N fsyncs.
// A put whose fsync does not complete within [Config.SyncFlushTimeout] returns
// [PutFlushDiskTimeout] (the record is written; only its durability is unconfirmed).
// [Store.PutMessageAsync] (the broker's send path) waits on no goroutine at all: it queues a
// callback (end offset → done) that the flush goroutine calls, in order, after the fsync
// covering the record; a deadline sweep every SyncFlushTimeout/8 (at most 100 ms) reports
// the ones past SyncFlushTimeout, and Close completes the rest after its final flush.
//
// Consume queues are flushed lazily by a second goroutine every
// [Config.FlushConsumeQueueInterval], because they can be rebuilt from the commitlog. That
// goroutine then writes the checkpoint: the commitlog offset below which every consume-queue
// entry is on disk ("consume queues flushed") and the fsynced commitlog offset.
//
// # Recovery
//
// [Open] trusts what the checkpoint says is on disk and re-checks everything after it:
//
//  1. It scans the commitlog from the start of the segment holding the checkpointed
//     consume-queue position (from the first segment when there is no valid checkpoint),
//     validating every record: magic code, TOTALSIZE against the fields, body CRC, that the
//     record's PHYSICALOFFSET field equals its position, a valid topic name and no NUL byte
//     in the properties (the body CRC does not cover topic and properties; a zero-filled
//     torn tail there shows up as NUL bytes, which PutMessage never accepts). The first record that fails —
//     a torn write, garbage, a flipped byte, zeros — is the cut: the rest of that segment is
//     zeroed and later segments are deleted. New puts continue at the cut.
//  2. Each consume queue drops its tail entries that point at or after the checkpointed
//     position (they may be torn or point at cut records) and the cut itself.
//  3. Every valid record from the checkpointed position up to the cut is dispatched again,
//     which rebuilds the dropped entries and adds those that never reached a consume queue.
//     A consume queue whose files are inconsistent is discarded and rebuilt from the first
//     segment.
//
// Because a SYNC_FLUSH put is acknowledged only after the fsync that covers it, and the scan
// stops only at a record that is invalid, an acknowledged record is never cut; because every
// record after the last checkpoint is validated, a torn record is never served.
//
// # Key index
//
// The key index finds messages by key: each key of a message's KEYS property (split on
// " ") and its UNIQ_KEY, under the index key topic + "#" + key, as RocketMQ's IndexFile
// does (docs/protocol.md §3.12 QUERY_MESSAGE, §5). Rolled-back transactional messages are not
// indexed; half messages are, under their half topic. An index file (index_file.go has the
// byte layout) holds a header, a fixed number of 20-byte entries {keyHash, commitlog
// offset, store-time delta in seconds, previous entry of the same slot} and a fixed number
// of hash slots, each holding the newest entry whose keyHash falls in it, so the entries of
// a slot form a chain from newest to oldest. Files are named by creation time; a full file
// is sealed (its slot table written after its entries) and a new one started
// ([IndexConfig]). Only the writable file's slot table lives in memory (4 bytes per slot);
// sealed files are read with pread.
//
// Entries are made by PutMessage under the writer lock, after the commitlog record and
// before the write position is published. They go to an in-memory tail of 4096 entries
// that is written to the file when full and at every checkpoint, so a put costs no extra
// system call; readers see tail entries as soon as the slot table points at them.
// [Store.Query] walks the key's slot chain in each file, newest file first, skipping files
// whose store-time range misses the query, and checks every candidate against the record
// it points at (topic, key, store time, and a valid record header at that offset), so
// 32-bit hash collisions never yield a wrong message and a torn or cut record is never
// returned.
//
// Durability and recovery: the checkpoint goroutine writes the tail, fsyncs the writable
// index file and then writes its header with the entry count and the "covered" commitlog
// offset (every record below it has its entries), before the checkpoint itself, so the
// index covers at least what the checkpoint says. At Open only the header's count of
// entries is trusted; they are checked (chain links, offsets in commitlog order and below
// the covered offset) and the slot table is rebuilt from them; an inconsistent tail is
// dropped with the record it belongs to. The commitlog scan of recovery starts no later
// than the covered offset and indexes every valid record from there (keys of a record
// that already have an entry are not indexed twice); then entries at or after the
// commitlog cut are dropped (files after it deleted, the file holding it truncated and
// unsealed). A file with a bad header is deleted with every newer file and re-indexed from
// the commitlog; a lost index directory is rebuilt entirely. Retention deletes sealed
// index files that only point at deleted segments.
//
// # Retention
//
// [Store.DeleteExpiredFiles] deletes the oldest commitlog segments whose last write is older
// than a cutoff (the broker's fileReservedTime), never the one being written, then drops
// consume-queue files that only point at deleted data and moves each queue's min offset to
// its first surviving message. Pulls below it answer OFFSET_TOO_SMALL.
//
// # Concurrency
//
// All methods are safe for concurrent use. Lock order: Store.lifeMu (read side held by every
// operation, write side by Close) → Store.putMu (the single writer) → Store.queuesMu →
// consumeQueue.mu; Store.putMu → index.mu; Store.putMu → cqMaps.mu → fdCache.mu;
// Store.cpMu → index.flushMu → index.mu. The
// flush lock (flusher.syncMu) is taken without holding any of them. Queries take no index
// lock.
package store
