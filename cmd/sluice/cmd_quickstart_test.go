package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// execRoot runs the command tree in-process with args and returns stdout, stderr and
// the command's error.
func execRoot(t *testing.T, timeout time.Duration, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// sluice quickstart passes its flags to package quickstart (whose tests cover the
// scenario) and runs it end to end, the inbox part's crashing consumer being this
// binary's hidden "quickstart inbox-child"; without --verbose nothing goes to stderr.
func TestQuickstartCommand(t *testing.T) {
	out, stderr, err := execRoot(t, 60*time.Second, "quickstart", "--orders", "3", "--failed", "1", "--outage-sends", "1")
	if err != nil {
		t.Fatalf("quickstart: %v\n%s", err, out)
	}
	if stderr != "" {
		t.Errorf("quickstart without --verbose wrote logs to stderr:\n%s", stderr)
	}
	for _, want := range []string{
		`consumer group order_service (subscribed "PaySuccess || PayFailed") received 4 message(s)`,
		"redis: embedded miniredis at 127.0.0.1:",
		": batch 2 [", "inbox OK: every payment booked exactly once across the crash",
		"quickstart OK in",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"quickstart", "--orders", "0"}, "--orders 0: must be 1..1000"},
		{[]string{"quickstart", "--outage-sends", "101"}, "--outage-sends 101: must be 1..100"},
		{[]string{"quickstart", "--verbose", "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"quickstart", "extra"}, "unknown command"},
		{[]string{"quickstart", "inbox-child"}, "inbox-child is started by sluice quickstart only"},
	} {
		_, _, err := execRoot(t, 10*time.Second, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestQuickstartVerboseLogs(t *testing.T) {
	out, stderr, err := execRoot(t, 60*time.Second, "quickstart", "--verbose", "--log-level", "debug", "--orders", "2", "--failed", "0")
	if err != nil {
		t.Fatalf("quickstart --verbose: %v\n%s", err, out)
	}
	if !strings.Contains(stderr, "level=") {
		t.Errorf("--verbose --log-level debug wrote no logs to stderr")
	}
	if !strings.Contains(out, `points_service (subscribed "PaySuccess") received 2 message(s)`) {
		t.Errorf("output:\n%s", out)
	}
}
