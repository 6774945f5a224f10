package broker

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestRetention: at the deleteWhen hour, segments older than fileReservedTime are
// deleted; a consumer behind the new minimum is moved to it (PULL_OFFSET_MOVED) instead of
// failing forever. Outside deleteWhen nothing is deleted unless the disk is too full.
func TestRetention(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.MappedFileSizeCommitLog = 4<<20 + 64<<10 // small segments: they fill fast
		c.MaxMessageSize = 4 << 20
		c.DeleteWhen = "04"
		c.FileReservedTime = 1 // hours: the smallest RocketMQ allows
	})
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Old", 1)
	body := make([]byte, 512<<10)
	for i := 0; i < 24; i++ { // ~12 MiB: three segments
		if r := sendV1(t, c, b.Addr(), "Old", 0, body, nil); r.ResponseCode() != remoting.Success {
			t.Fatal(r.Remark)
		}
	}
	// The first 04:00 at least 2 h from now: past fileReservedTime (1 h) for every file.
	now := time.Now()
	four := time.Date(now.Year(), now.Month(), now.Day(), 4, 0, 0, 0, now.Location())
	for four.Before(now.Add(2 * time.Hour)) {
		four = four.Add(24 * time.Hour)
	}
	notFour := four.Add(time.Hour)
	if n := b.cleanOnce(notFour, 10); n != 0 {
		t.Fatalf("deleted %d files outside deleteWhen", n)
	}
	if n := b.cleanOnce(four, 10); n == 0 {
		t.Fatal("nothing deleted at deleteWhen")
	}
	minOff := b.store.MinOffset("Old", 0)
	if minOff == 0 {
		t.Fatal("the consume queue's min offset did not move")
	}
	r := pull(t, c, b.Addr(), "g", "Old", 0, 0, "*", 0)
	if r.ResponseCode() != remoting.PullOffsetMoved || r.ExtFields["nextBeginOffset"] != strconv.FormatInt(minOff, 10) {
		t.Fatalf("pull below the minimum: %d %v", r.Code, r.ExtFields)
	}
	r = pull(t, c, b.Addr(), "g", "Old", 0, minOff, "*", 0)
	got, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true})
	if r.ResponseCode() != remoting.Success || err != nil || len(got) == 0 || got[0].QueueOffset != minOff {
		t.Fatalf("pull at the minimum: %d %v", r.Code, err)
	}
	// A full disk (over diskMaxUsedSpaceRatio) deletes expired files at once; a disk
	// almost full (10 points more) deletes even fresh ones, oldest first.
	for i := 0; i < 24; i++ {
		if r := sendV1(t, c, b.Addr(), "Old", 0, body, nil); r.ResponseCode() != remoting.Success {
			t.Fatal(r.Remark)
		}
	}
	now = time.Now()
	if n := b.cleanOnce(now, 80); n != 0 {
		t.Fatalf("fresh files deleted at 80%% usage: %d", n)
	}
	before := b.store.MinPhyOffset()
	if n := b.cleanOnce(now, 99); n == 0 || b.store.MinPhyOffset() <= before {
		t.Fatalf("a disk at 99%% deleted %d files", n)
	}
}

func TestUsedPercentIsDfUse(t *testing.T) {
	for _, c := range []struct {
		blocks, bfree, bavail uint64
		want                  int
	}{
		{66053021, 56872288, 14694583, 38}, // a large root reservation: df says 39 % (rounded up)
		{100, 100, 100, 0},                 // empty
		{100, 0, 0, 100},                   // full
		{100, 30, 25, 73},                  // 70 used, 5 reserved: 70 / 95
		{0, 0, 0, 0},                       // no blocks
		{100, 120, 10, 0},                  // inconsistent figures are not a full disk
	} {
		if got := usedPercent(c.blocks, c.bfree, c.bavail); got != c.want {
			t.Errorf("usedPercent(%d, %d, %d) = %d, want %d", c.blocks, c.bfree, c.bavail, got, c.want)
		}
	}
}
