package broker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Disk pressure policies (broker.conf key diskPressurePolicy). They decide what happens
// when the disk is almost full (diskMaxUsedSpaceRatio + 10 points, or 95 %) and the
// oldest commitlog files, not yet expired, still hold messages a consumer group has not
// consumed, delayed messages not yet delivered, or half messages without a transaction
// decision.
const (
	// DiskPressureRefuseWrites (the default) deletes only the oldest files whose messages
	// every consumer group has consumed, and refuses new sends (SERVICE_NOT_AVAILABLE,
	// 14, with a remark naming this setting) while the rest of what would have to go is
	// unconsumed; sends are accepted again once the disk is below that mark. A message is
	// never deleted unread because of disk pressure.
	DiskPressureRefuseWrites = "refuseWrites"
	// DiskPressureDeleteOldest deletes the oldest files even when they hold unconsumed
	// messages, as Apache RocketMQ does; each such deletion is logged per group and queue
	// and counted in [Stats].UnconsumedDeleted.
	DiskPressureDeleteOldest = "deleteOldest"
)

// Stats are counters of the broker's own decisions, for monitoring. All counts are
// since Start.
type Stats struct {
	// UnconsumedDeleted counts messages retention deleted before a consumer group that
	// had committed an offset on their queue consumed them, summed over groups (a
	// message two groups had not consumed counts twice), plus delayed messages deleted
	// before the schedule service delivered them and transactional half messages deleted
	// before their commit or rollback. Expired files (fileReservedTime)
	// and, with diskPressurePolicy=deleteOldest, files deleted for disk space add to it.
	UnconsumedDeleted int64
	// WritesRefused counts sends refused because the disk was full and
	// diskPressurePolicy=refuseWrites kept unconsumed messages.
	WritesRefused int64
	// RefusingWrites reports whether sends are being refused right now for that reason.
	RefusingWrites bool

	// RegisterOK counts successful REGISTER_BROKER calls (one per name server).
	RegisterOK int64
	// RegisterFailed counts failed REGISTER_BROKER calls; each is also logged at error
	// with the body size and topic count.
	RegisterFailed int64
	// LastRegisterBodyBytes is the size in bytes of the last registration body of the
	// whole topic table (after compression when it was compressed); registrations after
	// a topic change carry only the changed topics and are not counted here.
	LastRegisterBodyBytes int64
	// LastRegisterTopics is the number of topics in the last registration of the whole
	// topic table.
	LastRegisterTopics int64
	// RefusedNames counts requests refused because a topic, group or client id broke the
	// naming rules.
	RefusedNames int64
	// RefusedACL counts requests refused by the ACL.
	RefusedACL int64
	// RefusedLimits counts requests refused for a body over its request code's limit, and
	// heartbeats refused (in part) for a client limit (maxSubscriptionsPerGroup, ...).
	RefusedLimits int64
	// ClientEntries is the producer and consumer registrations kept now (bounded by
	// maxClientEntries); ClientSubscriptions the subscriptions kept now (bounded by
	// maxSubscriptions).
	ClientEntries, ClientSubscriptions int64
	// RefusedAddressShare counts heartbeats refused (in part) because their remote
	// address (IPv4, or IPv6 /64) used up its share (maxClientEntriesPerAddress,
	// maxSubscriptionsPerAddress); they count in RefusedLimits too.
	RefusedAddressShare int64
	// AclReloadRefused counts changed plain_acl.yml contents the broker could not apply
	// (empty, malformed, unreadable): the previous rules stayed in force; each is logged
	// at error.
	AclReloadRefused int64
	// AclNonceQuotaRefused counts signature v2 requests refused because their account
	// held its share of the nonce store (aclSignatureNoncesPerAccount).
	AclNonceQuotaRefused int64
}

// Stats returns the broker's counters. Safe to call at any time.
func (b *Broker) Stats() Stats {
	st := Stats{
		UnconsumedDeleted: b.pressure.unconsumedDeleted.Load(),
		WritesRefused:     b.pressure.writesRefused.Load(),
		RefusingWrites:    b.pressure.refusing.Load(),

		RegisterOK:            b.counters.RegisterOK.Load(),
		RegisterFailed:        b.counters.RegisterFailed.Load(),
		LastRegisterBodyBytes: b.counters.LastRegisterBodyBytes.Load(),
		LastRegisterTopics:    b.counters.LastRegisterTopics.Load(),
		RefusedNames:          b.counters.RefusedNames.Load(),
		RefusedACL:            b.counters.RefusedACL.Load(),
		RefusedLimits:         b.counters.RefusedLimits.Load(),
	}
	if b.acl != nil {
		st.AclReloadRefused, st.AclNonceQuotaRefused = b.acl.Refused(), b.acl.NonceQuotaRefused()
	}
	if b.clients != nil {
		n := b.clients.counts()
		st.ClientEntries, st.ClientSubscriptions, st.RefusedAddressShare = int64(n.entries), int64(n.subs), n.refusedShare
	}
	return st
}

// diskPressure holds the state of the disk-pressure policy.
type diskPressure struct {
	unconsumedDeleted atomic.Int64
	writesRefused     atomic.Int64
	refusing          atomic.Bool

	mu     sync.Mutex
	reason string // why writes are refused (for the send answer)
}

// refuseWrite returns the SERVICE_NOT_AVAILABLE answer for a send while the
// refuseWrites policy holds writes back, else nil.
func (b *Broker) refuseWrite() *remoting.RemotingCommand {
	if !b.pressure.refusing.Load() {
		return nil
	}
	b.pressure.writesRefused.Add(1)
	b.pressure.mu.Lock()
	reason := b.pressure.reason
	b.pressure.mu.Unlock()
	return b.sendResponse(remoting.ServiceNotAvailable, reason)
}

// setRefusing switches the refusal on or off, logging each change once. held are the
// unconsumed messages the oldest files hold, per group and queue: the answer and the log
// name the groups, so the operator knows whose consumption (or offset reset) frees space.
func (b *Broker) setRefusing(on bool, usage int, held []unconsumedLoss) {
	if on {
		kept, holders := sumLoss(held), describeHolders(held)
		reason := fmt.Sprintf("the broker's disk is full (%d%% used) and the oldest data holds %d unconsumed messages (%s): "+
			"new messages are refused rather than deleting them (diskPressurePolicy=%s); consume or free disk space",
			usage, kept, holders, DiskPressureRefuseWrites)
		b.pressure.mu.Lock()
		b.pressure.reason = reason
		b.pressure.mu.Unlock()
		if !b.pressure.refusing.Swap(true) {
			b.log.Error("disk full: refusing new messages to keep unconsumed ones", "usedPercent", usage, "unconsumedKept", kept,
				"heldBy", holders, "diskPressurePolicy", DiskPressureRefuseWrites)
		}
		return
	}
	if b.pressure.refusing.Swap(false) {
		b.log.Warn("disk pressure over: accepting new messages again", "usedPercent", usage)
	}
}

// unconsumedLoss is how many messages of one group's queue a deletion takes unread.
type unconsumedLoss struct {
	group, topic string
	queueID      int32
	count        int64
}

// scheduleReader names the schedule service as the reader of SCHEDULE_TOPIC_XXXX in
// unconsumed-deletion logs.
const scheduleReader = "(schedule service)"

// txnReader names the transaction service as the reader of RMQ_SYS_TRANS_HALF_TOPIC: a
// half message without a decision is unconsumed (deleting it loses the transaction).
const txnReader = "(transaction service)"

// unconsumedBelow returns, per group and queue with a committed offset (and per delay
// level, for delayed messages not yet delivered, and for half messages without a
// transaction decision), how many messages deleting every commitlog record below minPhy
// would take before the group read them.
func (b *Broker) unconsumedBelow(minPhy int64) ([]unconsumedLoss, error) {
	type gq struct {
		topic, group string
		queueID      int32
		offset       int64
	}
	var committed []gq
	b.offsets.mu.Lock()
	for k, qs := range b.offsets.table {
		topic, group, ok := splitOffsetKey(k)
		if !ok {
			continue
		}
		for q, off := range qs {
			committed = append(committed, gq{topic, group, q, off})
		}
	}
	b.offsets.mu.Unlock()
	// Delayed messages not yet delivered count too: the schedule service is their reader.
	for level := 1; level <= len(b.sched.levels); level++ {
		committed = append(committed, gq{message.ScheduleTopic, scheduleReader, int32(level - 1), b.sched.offset(level)})
	}
	var out []unconsumedLoss
	for _, c := range committed {
		newMin, err := b.store.QueueMinOffsetAt(c.topic, c.queueID, minPhy)
		if err != nil {
			return nil, err
		}
		if n := newMin - max(c.offset, b.store.MinOffset(c.topic, c.queueID)); n > 0 {
			out = append(out, unconsumedLoss{c.group, c.topic, c.queueID, n})
		}
	}
	// Half messages still waiting for their decision count too.
	newMin, err := b.store.QueueMinOffsetAt(message.TransHalfTopic, 0, minPhy)
	if err != nil {
		return nil, err
	}
	if n := b.txn.undecided(b.store.MinOffset(message.TransHalfTopic, 0), newMin); n > 0 {
		out = append(out, unconsumedLoss{txnReader, message.TransHalfTopic, 0, n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].group != out[j].group {
			return out[i].group < out[j].group
		}
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].queueID < out[j].queueID
	})
	return out, nil
}

// maxHoldersNamed is how many group queues a refusal names before "and N more".
const maxHoldersNamed = 3

// describeHolders names the group queues in ls, the largest counts first: "group g topic
// P queue 0: 31, ..." (at most maxHoldersNamed, then "and N more").
func describeHolders(ls []unconsumedLoss) string {
	ls = slices.Clone(ls)
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].count > ls[j].count })
	parts := make([]string, 0, maxHoldersNamed+1)
	for i, l := range ls {
		if i == maxHoldersNamed {
			parts = append(parts, fmt.Sprintf("and %d more", len(ls)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("group %s topic %s queue %d: %d", l.group, l.topic, l.queueID, l.count))
	}
	return strings.Join(parts, ", ")
}

func sumLoss(ls []unconsumedLoss) int64 {
	var n int64
	for _, l := range ls {
		n += l.count
	}
	return n
}

// deleteFiles deletes the k oldest expired segments (per cutoff) and reports the
// unconsumed messages that went with them: one log line per group and queue, and the
// UnconsumedDeleted counter.
func (b *Broker) deleteFiles(cutoff time.Time, k int, losses []unconsumedLoss, usage int, forced bool) int {
	if k == 0 {
		return 0
	}
	n, err := b.store.DeleteExpiredFiles(cutoff, k)
	if err != nil {
		b.log.Error("delete expired commitlog files", "err", err)
	}
	if n == 0 {
		return 0
	}
	why := "fileReservedTime expired"
	if forced {
		why = "disk almost full (diskPressurePolicy=" + DiskPressureDeleteOldest + ")"
	}
	for _, l := range losses {
		b.log.Error("retention deleted unconsumed messages", "group", l.group, "topic", l.topic, "queueId", l.queueID,
			"count", l.count, "why", why, "usedPercent", usage)
	}
	b.pressure.unconsumedDeleted.Add(sumLoss(losses))
	b.log.Info("deleted expired commitlog files", "count", n, "fileReservedTimeHours", b.cfg.FileReservedTime, "usedPercent", usage,
		"unconsumedDeleted", sumLoss(losses))
	return n
}

// cleanOnce applies retention as of now with the disk at usage percent (see
// retention.go). It returns the number of commitlog segments deleted.
func (b *Broker) cleanOnce(now time.Time, usage int) int {
	hours, _ := deleteHours(b.cfg.DeleteWhen)
	cutoff := now.Add(-time.Duration(b.cfg.FileReservedTime) * time.Hour)
	forced := usage >= b.cfg.DiskMaxUsedSpaceRatio+10 || usage >= 95
	switch {
	case forced:
		cutoff = now
	case usage >= b.cfg.DiskMaxUsedSpaceRatio:
	case hours[now.Hour()]:
	default:
		b.setRefusing(false, usage, nil)
		return 0
	}
	if !forced {
		b.setRefusing(false, usage, nil)
	}
	ends, err := b.store.ExpiredSegments(cutoff, store.DefaultDeleteFilesBatch)
	if err != nil {
		b.log.Error("plan retention", "err", err)
		return 0
	}
	if len(ends) == 0 {
		if forced && b.cfg.DiskPressurePolicy == DiskPressureRefuseWrites {
			b.setRefusing(false, usage, nil) // nothing deletable at all: only the segment being written
		}
		return 0
	}
	k := len(ends)
	losses, err := b.unconsumedBelow(ends[k-1])
	if err != nil {
		b.log.Error("count unconsumed messages before retention", "err", err)
		return 0
	}
	if forced && b.cfg.DiskPressurePolicy == DiskPressureRefuseWrites {
		// Only unexpired files go for disk space here: keep every one that holds
		// unconsumed messages (and all after it), delete the consumed ones before it.
		expired, err := b.store.ExpiredSegments(now.Add(-time.Duration(b.cfg.FileReservedTime)*time.Hour), store.DefaultDeleteFilesBatch)
		if err != nil {
			b.log.Error("plan retention", "err", err)
			return 0
		}
		held := losses
		for k > len(expired) && len(losses) > 0 {
			k--
			if k == 0 {
				losses = nil
				break
			}
			if losses, err = b.unconsumedBelow(ends[k-1]); err != nil {
				b.log.Error("count unconsumed messages before retention", "err", err)
				return 0
			}
		}
		if k < len(ends) {
			b.log.Warn("disk almost full: keeping commitlog files that hold unconsumed messages", "usedPercent", usage,
				"filesKept", len(ends)-k, "diskPressurePolicy", DiskPressureRefuseWrites)
			b.setRefusing(true, usage, held)
		} else {
			b.setRefusing(false, usage, nil)
		}
		return b.deleteFiles(cutoff, k, losses, usage, false)
	}
	if forced {
		b.log.Warn("disk almost full: deleting the oldest commitlog files even if not expired", "usedPercent", usage)
	}
	return b.deleteFiles(cutoff, k, losses, usage, forced)
}
