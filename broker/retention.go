package broker

import (
	"strconv"
	"strings"
	"syscall"
	"time"
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
			return nil, &ConfigError{Key: "deleteWhen", Value: s, Reason: "hours 00..23 separated by ';'"}
		}
		hours[h] = true
	}
	return hours, nil
}

// diskUsedRatio returns the used share of the file system holding dir, in percent.
func diskUsedRatio(dir string) (int, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	total := st.Blocks * uint64(st.Bsize)
	if total == 0 {
		return 0, nil
	}
	free := st.Bavail * uint64(st.Bsize)
	return int((total - free) * 100 / total), nil
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
