package broker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/remoting"
)

// Bursts of sends while the disk fills up: each send is answered on its own, SUCCESS
// (dense queue offsets) or SERVICE_NOT_AVAILABLE "disk is full"; when space is back the
// sends are stored again; and after a restart the queue holds exactly the sends
// answered SUCCESS: none of those refused comes back from what a run that failed
// part-way left on the file.
func TestSendRunsOnFullDisk(t *testing.T) {
	b, dir, store, mod := startSmallDiskBroker(t)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "FullRuns", 1)
	nc := dialBroker(t, b.Addr())
	opaque := int32(1)
	var acked []string
	refused := 0
	// burst writes n sends of 2 KiB in one write and sorts their answers.
	burst := func(round, n int) (failed int) {
		t.Helper()
		var reqs []*remoting.RemotingCommand
		for i := range n {
			key := fmt.Sprintf("r%03d-%03d", round, i)
			reqs = append(reqs, groupSendReq(false, "FullRuns", 0, []byte(key+"|"+strings.Repeat("f", 2048)), nil))
		}
		if _, err := nc.Write(encodeReqs(t, reqs, opaque, remoting.Credentials{})); err != nil {
			t.Fatal(err)
		}
		got, err := readAnswersFrom(nc, len(reqs))
		if err != nil {
			t.Fatalf("round %d: after %d answers: %v", round, len(got), err)
		}
		for i := range reqs {
			r := got[opaque+int32(i)]
			switch {
			case r.ResponseCode() == remoting.Success:
				if r.ExtFields["queueOffset"] != strconv.Itoa(len(acked)) {
					t.Fatalf("round %d send %d: queue offset %s, want %d", round, i, r.ExtFields["queueOffset"], len(acked))
				}
				acked = append(acked, fmt.Sprintf("r%03d-%03d", round, i))
			case r.ResponseCode() == remoting.ServiceNotAvailable && strings.Contains(r.Remark, "disk is full"):
				failed++
			default:
				t.Fatalf("round %d send %d: %d %q", round, i, r.Code, r.Remark)
			}
		}
		opaque += int32(len(reqs))
		refused += failed
		return failed
	}
	burst(0, 100)
	testkit.FillDisk(t, dir)
	filler := filepath.Join(dir, "filler")
	fi, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, fi.Size()-128<<10); err != nil { // a little room: a run gets part-way
		t.Fatal(err)
	}
	round := 1
	for ; round < 60; round++ { // bounded: 60 bursts are 12 MiB, more than the space reserved ahead
		if burst(round, 100) > 0 {
			break
		}
	}
	if refused == 0 {
		t.Fatal("no send was refused on a full disk")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Space is back: one send of the same size lands where the failed run began.
	round++
	if failed := burst(round, 1); failed > 0 {
		t.Fatalf("round %d: refused after space came back", round)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, store, mod)
	var got []string
	for _, m := range pullAll(t, c, b2.Addr(), "FullRuns", 0) {
		key, _, _ := strings.Cut(string(m.Body), "|")
		got = append(got, key)
	}
	if strings.Join(got, ",") != strings.Join(acked, ",") {
		t.Fatalf("after a restart the queue holds %d messages, %d were answered SUCCESS (%d refused)", len(got), len(acked), refused)
	}
	t.Logf("%d sends answered SUCCESS, %d refused on the full disk; the restarted broker holds exactly the former", len(acked), refused)
}
