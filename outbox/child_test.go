package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/kafka"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/outbox"
)

// Environment of the child processes the campaigns start (the test binary itself;
// TestMain sends it to runChild).
const (
	envChild   = "SLUICE_OUTBOX_CHILD" // "service", "relay" or "broker" (bench_relay_test.go)
	envDialect = "SLUICE_OUTBOX_CHILD_DIALECT"
	envDSN     = "SLUICE_OUTBOX_CHILD_DSN"
	envTable   = "SLUICE_OUTBOX_CHILD_TABLE"
	envOrders  = "SLUICE_OUTBOX_CHILD_ORDERS"
	envPrefix  = "SLUICE_OUTBOX_CHILD_PREFIX"  // service: order id prefix
	envSeqBase = "SLUICE_OUTBOX_CHILD_SEQBASE" // service: first seq
	envLog     = "SLUICE_OUTBOX_CHILD_LOG"     // service: "A <id>" per transaction begun; relay: "S|E <key> <unix ns>" per send start/end
	envEngine  = "SLUICE_OUTBOX_CHILD_ENGINE"
	envAddr    = "SLUICE_OUTBOX_CHILD_ADDR"
	envLease   = "SLUICE_OUTBOX_CHILD_LEASE" // relay lease, a duration
	envBatch   = "SLUICE_OUTBOX_CHILD_BATCH"
	envSend    = "SLUICE_OUTBOX_CHILD_SEND" // relay: "each" (RelayConfig.Send, default) or "batch" (SendBatch)
)

// runChild runs a child process role when the environment asks for one.
func runChild() (int, bool) {
	role := os.Getenv(envChild)
	if role == "" {
		return 0, false
	}
	var err error
	switch role {
	case "service":
		err = runService()
	case "relay":
		err = runRelayChild()
	case "broker":
		if err = runBrokerChild(); err == nil {
			return 0, true
		}
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	fmt.Fprintln(os.Stderr, "outbox child:", err)
	return 2, true
}

func childOutbox() (*sql.DB, *outbox.Outbox, error) {
	d, err := outbox.ParseDialect(os.Getenv(envDialect))
	if err != nil {
		return nil, nil, err
	}
	db, err := sql.Open(d.Driver(), os.Getenv(envDSN))
	if err != nil {
		return nil, nil, err
	}
	ob, err := outbox.New(outbox.Config{DB: db, Dialect: d, Table: os.Getenv(envTable), ValidateTopic: kafka.ValidateTopic})
	if err != nil {
		return nil, nil, err
	}
	return db, ob, nil
}

// errorsFor returns n copies of err.
func errorsFor(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func appendLine(f *os.File, line string) error {
	_, err := f.Write([]byte(line + "\n")) // one O_APPEND write: whole lines
	return err
}

// runService is the order service: one business transaction after another (order row +
// outbox row), lingering 0-1 ms before the Add and before the commit, rolling back one in
// ten on purpose, until it is killed. Each transaction is logged ("A <id>") before it
// begins, so the parent can kill it after a given number.
func runService() error {
	db, ob, err := childOutbox()
	if err != nil {
		return err
	}
	defer db.Close()
	d := ob.Dialect()
	log, err := os.OpenFile(os.Getenv(envLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	base, _ := strconv.ParseInt(os.Getenv(envSeqBase), 10, 64)
	insert := "INSERT INTO " + os.Getenv(envOrders) + " (id) VALUES (" + d.Placeholder(1) + ")"
	ctx := context.Background()
	for i := 0; i < 1_000_000; i++ {
		id := fmt.Sprintf("%s-%05d", os.Getenv(envPrefix), i)
		okey := fmt.Sprintf("acct-%d", i%campaignKeys)
		if err := appendLine(log, "A "+id); err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insert, id); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
		if err := ob.Add(ctx, tx, orderMessage(id, okey, base+int64(i))); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
		if rand.IntN(10) == 0 {
			err = tx.Rollback()
		} else {
			err = tx.Commit()
		}
		if err != nil {
			return err
		}
	}
	return errors.New("not killed")
}

// runRelayChild runs a relay to the engine until it is killed, logging each send's start
// and end ("S <key> <ns>", "E <key> <ns>").
func runRelayChild() error {
	db, ob, err := childOutbox()
	if err != nil {
		return err
	}
	defer db.Close()
	log, err := os.OpenFile(os.Getenv(envLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	lease, err := time.ParseDuration(os.Getenv(envLease))
	if err != nil {
		return err
	}
	batch, _ := strconv.Atoi(os.Getenv(envBatch))
	cfg := outbox.RelayConfig{BatchSize: batch, Concurrency: 4, Lease: lease,
		SendTimeout: lease / 2, PollInterval: 20 * time.Millisecond, BackoffBase: 50 * time.Millisecond,
		BackoffMax: 500 * time.Millisecond, MaxAttempts: 1_000_000, Logger: testkit.Quiet()}
	if os.Getenv(envSend) == "batch" {
		inner, shutdown, err := engineBatch(os.Getenv(envEngine), os.Getenv(envAddr))
		if err != nil {
			return err
		}
		defer shutdown()
		cfg.SendBatch = func(ctx context.Context, msgs []*message.Message) []error {
			for _, m := range msgs {
				if err := appendLine(log, fmt.Sprintf("S %s %d", outbox.StableKey(m), time.Now().UnixNano())); err != nil {
					return errorsFor(len(msgs), err)
				}
			}
			errs := inner(ctx, msgs)
			end := time.Now().UnixNano()
			for i, m := range msgs {
				if errs[i] == nil {
					if err := appendLine(log, fmt.Sprintf("E %s %d", outbox.StableKey(m), end)); err != nil {
						errs[i] = err
					}
				}
			}
			return errs
		}
	} else {
		inner, shutdown, err := engineSend(os.Getenv(envEngine), os.Getenv(envAddr))
		if err != nil {
			return err
		}
		defer shutdown()
		cfg.Send = func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
			k := outbox.StableKey(m)
			if err := appendLine(log, fmt.Sprintf("S %s %d", k, time.Now().UnixNano())); err != nil {
				return nil, err
			}
			res, err := inner(ctx, m)
			if err == nil {
				err = appendLine(log, fmt.Sprintf("E %s %d", k, time.Now().UnixNano()))
			}
			return res, err
		}
	}
	r, err := outbox.NewRelay(ob, cfg)
	if err != nil {
		return err
	}
	if err := r.Start(context.Background()); err != nil {
		return err
	}
	time.Sleep(5 * time.Minute) // the parent kills us long before; bounded if it does not
	return errors.New("not killed within 5 min")
}

// child is a child process of a campaign.
type child struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

func startChild(t testing.TB, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), envChild+"="+role), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stderr: &stderr}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Signal(syscall.SIGKILL)
			_ = c.cmd.Wait()
		}
	})
	return c
}

// kill SIGKILLs the child and checks that it died of it (not of an error before).
func (c *child) kill(t testing.TB) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGCONT) // a stopped child dies of SIGKILL too, but say so
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v; stderr: %s", err, c.stderr.String())
	}
}

func (c *child) signal(t testing.TB, s syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(s); err != nil {
		t.Fatalf("signal %v: %v; stderr: %s", s, err, c.stderr.String())
	}
}

// lines returns the lines of a child's log file.
func lines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	s := strings.Split(string(b), "\n")
	if len(s) > 0 && s[len(s)-1] == "" { // a line still being written has no newline yet
		s = s[:len(s)-1]
	}
	return s
}
