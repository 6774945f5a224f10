package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
)

const (
	killChildDirEnv   = "SLUICE_STORE_KILL9_DIR"
	killChildFlushEnv = "SLUICE_STORE_KILL9_FLUSH"
)

// TestKill9Child is the child process of TestKill9: it puts messages (single, batches
// and groups) from several goroutines and prints one line per acknowledged put until it is killed (or a bound is
// reached). It does nothing when run directly.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv(killChildDirEnv)
	if dir == "" {
		t.Skip("helper process for TestKill9")
	}
	ft, err := ParseFlushDiskType(os.Getenv(killChildFlushEnv))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(dir)
	cfg.FlushDiskType = ft
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1_000_000 && time.Now().Before(deadline); i++ {
				q := int32((g + i) % 3)
				body := fmt.Sprintf("g%d-%d-%s", g, i, strings.Repeat("k", i%700))
				type ack struct {
					q    int32
					off  int64
					body string
				}
				var acks []ack
				switch {
				case i%7 == 0:
					batch := []*message.MessageExt{newMsg("K", q, body+"-a", "A"), newMsg("K", q, body+"-b", "B")}
					r, err := s.PutMessages(context.Background(), batch, nil)
					if err != nil || r.Status != PutOK {
						fmt.Fprintf(os.Stderr, "put batch: %v %v\n", r.Status, err)
						os.Exit(3)
					}
					acks = append(acks, ack{q, r.QueueOffset, body + "-a"}, ack{q, r.QueueOffset + 1, body + "-b"})
				case i%5 == 0: // a group over two queues, as the broker stores a burst of sends
					group := []*message.MessageExt{newMsg("K", q, body+"-x", "A"), newMsg("K", (q+1)%3, body+"-y", "A"), newMsg("K", q, body+"-z", "A")}
					res, errs := make([]PutResult, 3), make([]error, 3)
					s.PutGroup(context.Background(), group, []int64{message.TagHashCode("A"), message.TagHashCode("A"), message.TagHashCode("A")}, res, errs)
					for j, m := range group {
						if errs[j] != nil || res[j].Status != PutOK {
							fmt.Fprintf(os.Stderr, "put group: %v %v\n", res[j].Status, errs[j])
							os.Exit(3)
						}
						acks = append(acks, ack{m.QueueID, res[j].QueueOffset, string(m.Body)})
					}
				default:
					r, err := s.PutMessage(context.Background(), newMsg("K", q, body, "A"), message.TagHashCode("A"))
					if err != nil || r.Status != PutOK {
						fmt.Fprintf(os.Stderr, "put: %v %v\n", r.Status, err)
						os.Exit(3)
					}
					acks = append(acks, ack{q, r.QueueOffset, body})
				}
				mu.Lock()
				for _, a := range acks {
					fmt.Fprintf(out, "acked %d %d %s\n", a.q, a.off, a.body[:min(len(a.body), 24)])
				}
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.Close()
}

type ackedMsg struct {
	queueID     int32
	queueOffset int64
	bodyPrefix  string
}

// TestKill9 runs a child process that writes with SYNC_FLUSH (and ASYNC_FLUSH), kills it
// with SIGKILL in the middle of the traffic, reopens the store and checks that every
// acknowledged message is there, at its queue offset, and that nothing invalid is served.
func TestKill9(t *testing.T) {
	if os.Getenv(killChildDirEnv) != "" {
		t.Skip("in the child")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip("no test executable:", err)
	}
	for _, ft := range []FlushDiskType{SyncFlush, AsyncFlush} {
		t.Run(ft.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(exe, "-test.run=^TestKill9Child$", "-test.count=1")
			cmd.Env = append(os.Environ(), killChildDirEnv+"="+dir, killChildFlushEnv+"="+ft.String())
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var acked []ackedMsg
			sc := bufio.NewScanner(stdout)
			for len(acked) < 1500 && sc.Scan() {
				var a ackedMsg
				if _, err := fmt.Sscanf(sc.Text(), "acked %d %d %s", &a.queueID, &a.queueOffset, &a.bodyPrefix); err != nil {
					t.Fatalf("child line %q: %v", sc.Text(), err)
				}
				acked = append(acked, a)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			if len(acked) < 1500 {
				t.Fatalf("child stopped after %d acks: %s", len(acked), stderr.String())
			}

			s := openStore(t, testConfig(dir))
			served := map[int32][]*message.MessageExt{}
			for q := int32(0); q < 3; q++ {
				for off := int64(0); off < s.MaxOffset("K", q); {
					r, err := s.GetMessage("K", q, off, 32, 0, nil)
					if err != nil || r.Status != Found {
						t.Fatalf("queue %d offset %d: %v %v", q, off, r.Status, err)
					}
					ms, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true})
					if err != nil {
						t.Fatalf("served an invalid record: %v", err)
					}
					for k, m := range ms {
						if m.QueueOffset != off+int64(k) {
							t.Fatalf("queue %d: record at %d says %d", q, off+int64(k), m.QueueOffset)
						}
					}
					served[q] = append(served[q], ms...)
					off = r.NextBeginOffset
				}
			}
			for _, a := range acked {
				ms := served[a.queueID]
				if a.queueOffset >= int64(len(ms)) {
					t.Fatalf("acknowledged message %+v lost (queue has %d)", a, len(ms))
				}
				if body := string(ms[a.queueOffset].Body); !strings.HasPrefix(body, a.bodyPrefix) {
					t.Fatalf("acknowledged message %+v: found body %.20q", a, body)
				}
			}
			r := put(t, s, newMsg("K", 0, "after-kill", ""))
			if r.QueueOffset != int64(len(served[0])) {
				t.Fatalf("put after recovery at queue offset %d, want %d", r.QueueOffset, len(served[0]))
			}
			t.Logf("%d acked before SIGKILL, %d recovered", len(acked), len(served[0])+len(served[1])+len(served[2]))
		})
	}
}
