package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
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

// groupSection returns the lines printed under "consumer group <group> ...", up to the
// next blank line.
func groupSection(t *testing.T, out, group string) (header string, lines []string) {
	t.Helper()
	i := strings.Index(out, "consumer group "+group+" (subscribed")
	if i < 0 {
		t.Fatalf("no section for group %s in output:\n%s", group, out)
	}
	rest := out[i:]
	if j := strings.Index(rest, "\n\n"); j >= 0 {
		rest = rest[:j]
	}
	all := strings.Split(strings.TrimSpace(rest), "\n")
	return all[0], all[1:]
}

var qsDataDir = regexp.MustCompile(`\(data in (\S+)\)`)

func TestQuickstart(t *testing.T) {
	out, stderr, err := execRoot(t, 60*time.Second, "quickstart")
	if err != nil {
		t.Fatalf("quickstart failed: %v\n%s", err, out)
	}
	if stderr != "" {
		t.Errorf("quickstart without --verbose wrote logs to stderr:\n%s", stderr)
	}

	header, lines := groupSection(t, out, "order_service")
	if !strings.Contains(header, `"PaySuccess || PayFailed") received 12 message(s)`) {
		t.Errorf("order_service header %q", header)
	}
	if len(lines) != 12 {
		t.Errorf("order_service lines = %d, want 12:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i := 1; i <= 12; i++ {
		tag, status := "PaySuccess", "PAID"
		if i > 10 {
			tag, status = "PayFailed", "DECLINED"
		}
		order := fmt.Sprintf("ORD-%04d", 1000+i)
		want := fmt.Sprintf(`%s key=%s  {"orderId":"%s","amount":%s,"status":"%s"}`,
			padTag(tag), order, order, strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", float64(1999+i*250)/100), "0"), "."), status)
		if i > len(lines) || strings.TrimSpace(lines[i-1]) != want {
			t.Errorf("order_service line %d: want %q, got:\n%s", i, want, strings.Join(lines, "\n"))
		}
	}

	header, lines = groupSection(t, out, "points_service")
	if !strings.Contains(header, `"PaySuccess") received 10 message(s)`) {
		t.Errorf("points_service header %q", header)
	}
	if len(lines) != 10 {
		t.Errorf("points_service lines = %d, want 10:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		order := fmt.Sprintf("ORD-%04d", 1001+i)
		if !strings.HasPrefix(strings.TrimSpace(l), "PaySuccess key="+order+" ") {
			t.Errorf("points_service line %d = %q, want PaySuccess of %s", i+1, l, order)
		}
	}
	if strings.Contains(strings.Join(lines, "\n"), "PayFailed") {
		t.Errorf("points_service (PaySuccess only) received a PayFailed event:\n%s", strings.Join(lines, "\n"))
	}
	for _, want := range []string{"created topic PayEvents with 4 queues", "both groups received exactly what they subscribed to", "quickstart OK in"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	m := qsDataDir.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no data directory in output:\n%s", out)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory %s still exists after quickstart (stat: %v)", m[1], err)
	}
}

// padTag pads a tag as the quickstart's %-10s does.
func padTag(tag string) string { return fmt.Sprintf("%-10s", tag) }

func TestQuickstartReportsMissingMessages(t *testing.T) {
	// points_service subscribed to a tag nobody sends: after the deadline the run fails,
	// naming the group and what it is missing, and still shuts everything down.
	var out bytes.Buffer
	err := runQuickstart(context.Background(), &out, qsOptions{orders: 3, failed: 1, timeout: 1500 * time.Millisecond, log: discardLogger(), pointsTags: "Refund"})
	if err == nil {
		t.Fatalf("quickstart succeeded although points_service subscribed to Refund:\n%s", out.String())
	}
	for _, want := range []string{"group points_service is missing 3 of 3 message(s)", "PaySuccess/ORD-1001", "PaySuccess/ORD-1003"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "order_service") {
		t.Errorf("error %q blames order_service, which got everything", err)
	}
	if strings.Contains(out.String(), "quickstart OK") {
		t.Errorf("output claims success:\n%s", out.String())
	}
	m := qsDataDir.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no data directory in output:\n%s", out.String())
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory %s still exists after a failed quickstart (stat: %v)", m[1], err)
	}
}

func TestQuickstartFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"quickstart", "--orders", "0"}, "--orders 0: must be 1..1000"},
		{[]string{"quickstart", "--failed", "-1"}, "--failed -1: must be 0..1000"},
		{[]string{"quickstart", "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"quickstart", "--verbose", "--log-level", "loud"}, `--log-level "loud"`},
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
