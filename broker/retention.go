package broker

import (
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicemq/sluice/config"
)

// Retention (Java DefaultMessageStore.CleanCommitLogService): commitlog segments last
// written more than fileReservedTime hours ago are deleted once a day at the deleteWhen
// hour, or at once when the store's disk is fuller than diskMaxUsedSpaceRatio percent; then
// the fullest disk gets room even from segments not yet expired (oldest first). Consume
// queues follow the commitlog, and a consumer whose offset fell below a queue's new minimum
// is answered PULL_OFFSET_MOVED with the minimum as its next offset. What happens when the
// files to delete for disk space still hold unconsumed messages is diskPressurePolicy's
// choice (diskpressure.go, with cleanOnce); every deletion of unconsumed messages is logged
// per group and queue and counted in Stats.

// deleteHours parses deleteWhen: hours of the day separated by ";" ("04", "04;16").
func deleteHours(s string) (map[int]bool, error) {
	hours := map[int]bool{}
	for _, f := range strings.Split(s, ";") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		h, err := strconv.Atoi(f)
		if err != nil || h < 0 || h > 23 {
			return nil, &config.Error{Package: "broker", Field: "deleteWhen", Value: s, Reason: "hours 00..23 separated by ';'"}
		}
		hours[h] = true
	}
	return hours, nil
}

// diskUsedRatio returns the used share of the file system holding dir, in percent, as
// df(1) computes Use%: used / (used + available to unprivileged users). See
// [usedPercent] for why neither total nor free blocks alone are the denominator.
func diskUsedRatio(dir string) (int, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return usedPercent(st.Blocks, st.Bfree, st.Bavail), nil
}

// usedPercent is df's Use% of a file system with blocks in all, bfree free and bavail
// of those available to unprivileged users: used = blocks - bfree, and the share is
// used / (used + bavail), rounded down. Blocks reserved for root are neither used nor
// available, so they count on neither side. (1 - bavail/blocks would count them as
// used: on a file system with a large reservation that reads "77 %" where df says
// 38 %, and a broker with diskMaxUsedSpaceRatio=75 would act on a disk that is far from
// full. Apache RocketMQ computes (total - free) / total from Java's getFreeSpace,
// counting the reservation as free; df's figure is the one operators watch.)
func usedPercent(blocks, bfree, bavail uint64) int {
	if blocks == 0 || bfree > blocks {
		return 0
	}
	used := blocks - bfree
	if used+bavail == 0 {
		return 0
	}
	return int(used * 100 / (used + bavail))
}

// retentionLoop checks every cleanResourceInterval ms whether to delete files.
func (b *Broker) retentionLoop() {
	t := time.NewTicker(time.Duration(b.cfg.CleanResourceInterval) * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case now := <-t.C:
			usage, err := diskUsedRatio(b.cfg.StorePathRootDir)
			if err != nil {
				b.log.Warn("disk usage", "err", err)
			}
			b.cleanOnce(now, usage)
		}
	}
}
