package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/kafka"
)

// TestAdminKafkaDLQPaging pages through 8 dead letters on two partitions (5 and 3) with
// --limit and --from: each page in partition/offset order, the total on every page, the
// next page's --from on the last line (and in -o json), every dead letter exactly once.
func TestAdminKafkaDLQPaging(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, kafka.DLQTopic("paged")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for p, n := range []int{5, 3} {
		for i := range n {
			r := &kgo.Record{Topic: kafka.DLQTopic("paged"), Partition: int32(p), Key: []byte(fmt.Sprintf("k%d-%d", p, i)), Value: []byte("v")}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	list := func(args ...string) (string, error) {
		t.Helper()
		return run(t, append([]string{"admin", "kafka", "--brokers", brokers[0], "dlq", "list", "--group", "paged"}, args...)...)
	}
	rowRe := regexp.MustCompile(`(?m)^ +(\d) +(\d+) `)
	rows := func(out string) []string {
		var got []string
		for _, m := range rowRe.FindAllStringSubmatch(out, -1) {
			got = append(got, m[1]+":"+m[2])
		}
		return got
	}
	for _, tc := range []struct {
		args []string
		rows string
		last string
	}{
		{[]string{"--limit", "3"}, "0:0 0:1 0:2", "3 dead letter(s) shown from 0:0 to 0:2 of 8; more: --from 0:3"},
		{[]string{"--limit", "3", "--from", "0:3"}, "0:3 0:4 1:0", "3 dead letter(s) shown from 0:3 to 1:0 of 8; more: --from 1:1"},
		{[]string{"--limit", "5"}, "0:0 0:1 0:2 0:3 0:4", "5 dead letter(s) shown from 0:0 to 0:4 of 8; more: --from 1:0"},
		{[]string{"--limit", "3", "--from", "1:1"}, "1:1 1:2", "2 dead letter(s) shown from 1:1 to 1:2 of 8\n"},
		{[]string{"--from", "1:3"}, "", "0 dead letter(s) shown from 1:3 of 8\n"},
		{nil, "0:0 0:1 0:2 0:3 0:4 1:0 1:1 1:2", "8 dead letter(s) shown from 0:0 to 1:2 of 8\n"},
	} {
		out, err := list(tc.args...)
		if err != nil || strings.Join(rows(out), " ") != tc.rows || !strings.Contains(out, tc.last) || !strings.Contains(out, "group paged: 8 dead letter(s)") {
			t.Errorf("dlq list %v: %v, rows %v, want %s and %q\n%s", tc.args, err, rows(out), tc.rows, tc.last, out)
		}
	}

	// Following the pages' --from visits each dead letter once.
	seen := map[string]int{}
	from := "0:0"
	for page := 0; from != ""; page++ {
		if page > 10 {
			t.Fatal("paging does not end")
		}
		out, err := list("--limit", "2", "--from", from, "-o", "json")
		var v struct {
			Total int64
			More  bool
			Next  *kafka.DLQCursor
			Rows  []struct {
				Partition int
				Offset    int64
				Keys      []string
			}
		}
		if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Total != 8 || len(v.Rows) == 0 || len(v.Rows) > 2 || v.More != (v.Next != nil) {
			t.Fatalf("page from %s: %v %+v\n%s", from, err, v, out)
		}
		for _, r := range v.Rows {
			seen[fmt.Sprintf("%d:%d", r.Partition, r.Offset)]++
		}
		from = ""
		if v.More {
			from = v.Next.String()
		}
	}
	if len(seen) != 8 {
		t.Errorf("pages visited %v, want 8 dead letters once each", seen)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("dead letter %s listed %d times", k, n)
		}
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--limit", "0"}, exitUsage, "--limit 0: must be 1..10000"},
		{[]string{"--from", "3"}, exitUsage, "want partition:offset"},
		{[]string{"--from", "0:-1"}, exitUsage, "want partition:offset"},
		{[]string{"--from", "2:0"}, exitFailure, "has partitions 0..1"},
	} {
		_, err := list(tc.args...)
		if err == nil || exitCode(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("dlq list %v: err %v (exit %d), want exit %d mentioning %q", tc.args, err, exitCodeOrZero(err), tc.code, tc.want)
		}
	}
}
