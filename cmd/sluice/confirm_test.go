//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

// openPTY opens a pseudo-terminal pair (Linux /dev/ptmx): what the user types goes into
// master, the command reads it from tty, which is a terminal for term.IsTerminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("needs a pseudo-terminal (/dev/ptmx): %v", err)
	}
	t.Cleanup(func() { m.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Skipf("needs a pseudo-terminal: unlock: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Skipf("needs a pseudo-terminal: number: %v", e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("needs a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// runIn executes the command tree with stdin in and returns stdout and stderr.
func runIn(t *testing.T, in io.Reader, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut syncBuffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(in)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// TestDestructiveConfirmations: topic delete and offset reset state their effect and
// refuse without --yes when stdin is not a terminal (a script), ask on a terminal and
// change nothing on "n", go ahead on "y"/"yes" or with --yes.
func TestDestructiveConfirmations(t *testing.T) {
	quiet := testkit.Quiet()
	cl := startAdminCluster(t)
	ns, b := cl.ns, cl.b
	base := cl.admin
	adm := func(in io.Reader, args ...string) (string, string, error) {
		t.Helper()
		return runIn(t, in, append(base, args...)...)
	}
	noTTY := func() io.Reader { return strings.NewReader("y\n") } // a pipe saying y is still no terminal
	if out, _, err := adm(noTTY(), "topic", "create", "--topic", "Doomed,Kept", "--queues", "1"); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	c := testkit.Context(t, 60*time.Second)
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{ns.Addr()}, Group: "cf-pg", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(c); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := p.SendSync(c, message.NewMessage("Doomed", []byte("d"+strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Shutdown(c); err != nil {
		t.Fatal(err)
	}
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	resp, err := rc.InvokeSync(c, b.Addr(), remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{
		"consumerGroup": "reader", "topic": "Doomed", "queueId": "0", "commitOffset": "0"}, nil))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("commit: %v %v", err, resp)
	}
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{ns.Addr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	committed := func() int64 {
		t.Helper()
		offs, err := a.ConsumerOffsets(c, "reader", "Doomed")
		if err != nil || len(offs) != 1 {
			t.Fatalf("offsets: %v %v", offs, err)
		}
		return offs[0].Committed
	}
	routed := func(topic string) bool {
		_, err := a.TopicRoute(c, topic)
		return err == nil
	}
	refused := func(what string, err error, want string) {
		t.Helper()
		if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v (exit %d), want exit 2 mentioning %q", what, err, exitCodeOrZero(err), want)
		}
	}

	// A script (stdin not a terminal) without --yes: refused, the effect named, nothing done.
	deleteEffect := "delete topic Doomed from " + b.Name() + ": 1 queue(s), 2 message(s) stored, offsets of 1 consumer group(s) (reader)"
	out, _, err := adm(noTTY(), "topic", "delete", "--topic", "Doomed")
	refused("topic delete without --yes", err, "this would "+deleteEffect+"; add --yes to do it")
	resetEffect := "skip every message of Doomed that reader has not consumed yet (its offsets move to the end of each queue); reader lags 2 message(s) on Doomed now (1 of 1 queue(s) with offsets)"
	_, _, err = adm(noTTY(), "offset", "reset", "--group", "reader", "--topic", "Doomed", "--time", "end")
	refused("offset reset without --yes", err, "this would "+resetEffect)
	if !routed("Doomed") || committed() != 0 || out != "" {
		t.Fatalf("a refused command changed something (route %t, committed %d) or printed %q", routed("Doomed"), committed(), out)
	}

	// On a terminal: asked on stderr; "n" changes nothing, "y" resets.
	master, tty := openPTY(t)
	answer := func(s string) {
		t.Helper()
		if _, err := master.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	answer("n\n")
	_, stderr, err := adm(tty, "offset", "reset", "--group", "reader", "--topic", "Doomed", "--time", "end")
	refused("offset reset answered n", err, "not confirmed: nothing was changed")
	if !strings.Contains(stderr, "This will "+resetEffect) || !strings.Contains(stderr, "Proceed? [y/N]") || committed() != 0 {
		t.Errorf("answered n: stderr %q, committed %d", stderr, committed())
	}
	answer("y\n")
	out, stderr, err = adm(tty, "offset", "reset", "--group", "reader", "--topic", "Doomed", "--time", "end")
	if err != nil || !strings.Contains(out, "reset group reader, topic Doomed") || !strings.Contains(stderr, "Proceed?") || committed() != 2 {
		t.Errorf("answered y: %v, out %q, stderr %q, committed %d", err, out, stderr, committed())
	}
	answer("yes\n")
	if out, stderr, err = adm(tty, "topic", "delete", "--topic", "Doomed"); err != nil || !strings.Contains(out, "deleted topic Doomed") || !strings.Contains(stderr, "This will delete topic Doomed") {
		t.Errorf("topic delete answered yes: %v, out %q, stderr %q", err, out, stderr)
	}
	if routed("Doomed") {
		t.Error("Doomed still has a route after its confirmed delete")
	}

	// --yes: no question, even on a terminal.
	out, stderr, err = adm(tty, "topic", "delete", "--topic", "Kept", "--yes")
	if err != nil || !strings.Contains(out, "deleted topic Kept") || stderr != "" || routed("Kept") {
		t.Errorf("topic delete --yes: %v, out %q, stderr %q", err, out, stderr)
	}
	// A typo is refused before any question.
	_, stderr, err = adm(tty, "topic", "delete", "--topic", "Kep")
	if err == nil || exitCode(err) != exitNotFound || stderr != "" {
		t.Errorf("topic delete of an unknown topic: %v (exit %d), stderr %q", err, exitCodeOrZero(err), stderr)
	}
}
