package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

// TestOperatorCommands walks what an operator scripts: dead letters totalled and paged
// newest first, the lagging group on top of `group list`, typos refused with the nearest
// names and no state left behind, a group deleted only with --yes, -o json everywhere,
// and — with the broker stopped while its name server runs — every data command failing
// with exit code 4 and a message naming the name server, never an empty answer.
func TestOperatorCommands(t *testing.T) {
	quiet := testkit.Quiet()
	cl := startAdminCluster(t)
	ns, b := cl.ns, cl.b
	stop := cl.stop
	nsAddr := ns.Addr()
	adm := func(args ...string) (string, error) { t.Helper(); return cl.adm(t, args...) }
	mustCode := func(what string, err error, code int, want string) {
		t.Helper()
		if err == nil || exitCode(err) != code || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v (exit %d), want exit %d mentioning %q", what, err, exitCodeOrZero(err), code, want)
		}
	}
	if out, err := adm("topic", "create", "--topic", "Orders,Refunds", "--queues", "2"); err != nil || strings.Count(out, "route of") != 2 {
		t.Fatalf("bulk create: %v\n%s", err, out)
	}

	// 7 messages; 5 dead letters of billing; "lagging" 3 behind.
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{nsAddr}, Group: "ops-pg", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	c := testkit.Context(t, 30*time.Second)
	var sent []*message.SendResult
	for i := range 7 {
		r, err := p.SendSync(c, message.NewMessage("Orders", []byte("m"+strconv.Itoa(i))).SetKeys("k"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, r)
	}
	if err := p.Shutdown(c); err != nil {
		t.Fatal(err)
	}
	call := func(code remoting.RequestCode, ext map[string]string) {
		t.Helper()
		resp, err := rc.InvokeSync(c, b.Addr(), remoting.NewRequest(code, ext, nil))
		if err != nil || resp.ResponseErr() != nil {
			t.Fatalf("request %d: %v %v", code, err, resp)
		}
	}
	for _, r := range sent[:5] {
		_, phy, _ := message.ParseOffsetMsgID(r.OffsetMsgID)
		call(remoting.ConsumerSendMsgBack, map[string]string{"offset": strconv.FormatInt(phy, 10), "group": "billing", "delayLevel": "-1",
			"originMsgId": r.MsgID, "maxReconsumeTimes": "2"})
	}
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{nsAddr}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	qs, err := a.QueueOffsets(c, "Orders")
	if err != nil {
		t.Fatal(err)
	}
	left := int64(3)
	for _, q := range qs {
		behind := min(left, q.Max)
		left -= behind
		call(remoting.UpdateConsumerOffset, map[string]string{"consumerGroup": "lagging", "topic": "Orders",
			"queueId": strconv.Itoa(q.Queue.QueueID), "commitOffset": strconv.FormatInt(q.Max-behind, 10)})
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { n, err := a.CountDLQ(c, "billing"); return err == nil && n.Total == 5 }, "5 dead letters")

	// Dead letters: total, newest first, paged.
	out, err := adm("dlq", "list", "--group", "billing", "--limit", "2")
	if err != nil || !strings.Contains(out, "group billing: 5 dead letter(s), 5 not re-driven yet") ||
		!strings.Contains(out, "2 dead letter(s) shown: 1–2 of 5, newest first; more: --page 2 (or --all)") {
		t.Fatalf("dlq list --limit 2: %v\n%s", err, out)
	}
	if i, j := strings.Index(out, sent[4].MsgID), strings.Index(out, sent[3].MsgID); i < 0 || j < 0 || i > j || strings.Contains(out, sent[0].MsgID) {
		t.Errorf("page 1 is not the newest two:\n%s", out)
	}
	if out, err := adm("dlq", "list", "--group", "billing", "--limit", "2", "--page", "3"); err != nil || !strings.Contains(out, "1 dead letter(s) shown: 5–5 of 5") || !strings.Contains(out, sent[0].MsgID) {
		t.Errorf("dlq list page 3: %v\n%s", err, out)
	}
	out, err = adm("dlq", "list", "--group", "billing", "--all", "-o", "json")
	var page struct {
		Total int64
		More  bool
		Rows  []struct{ MsgID string }
	}
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || page.Total != 5 || len(page.Rows) != 5 || page.More || page.Rows[0].MsgID != sent[4].MsgID {
		t.Errorf("dlq list --all -o json: %v %+v\n%s", err, page, out)
	}
	_, err = adm("dlq", "list", "--group", "biling")
	mustCode("dlq list of a typo", err, exitNotFound, "did you mean billing?")

	// Groups: the lagging one first; its state and the real retry budget of billing.
	out, err = adm("group", "list")
	if err != nil || !regexp.MustCompile(`(?m)\AGROUP.*\nlagging +3 +\S+ +0 +- +- +offsets-only +-\n`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^billing +0 +- +0 +- +- +offline +2$`).MatchString(out) {
		t.Errorf("group list:\n%s", out)
	}
	var doc groupsJSON
	if out, err := adm("group", "list", "-o", "json"); err != nil || json.Unmarshal([]byte(out), &doc) != nil || doc.Partial ||
		len(doc.Groups) < 2 || doc.Groups[0].Group != "lagging" || doc.Groups[0].LagSeconds < 0 {
		t.Errorf("group list -o json: %v %+v", err, doc)
	}

	// Typos leave no state: an unknown group or topic is refused with the nearest names.
	_, err = adm("offset", "reset", "--group", "nosuchgroup", "--topic", "Orders", "--time", "end")
	mustCode("offset reset of an unknown group", err, exitNotFound, `consumer group "nosuchgroup"`)
	_, err = adm("offset", "reset", "--group", "laging", "--topic", "Orders", "--time", "end")
	mustCode("offset reset of a typo", err, exitNotFound, "did you mean lagging?")
	if all, _ := a.GroupSummaries(c); len(all) != 2 {
		t.Errorf("groups after the refused resets: %+v", all)
	}
	_, err = adm("offset", "reset", "--group", "lagging", "--topic", "Orders", "--time", "")
	mustCode("offset reset with an empty time", err, exitUsage, "--time")
	_, err = adm("topic", "delete", "--topic", "NoSuchTopic")
	mustCode("topic delete of an unknown topic", err, exitNotFound, `topic "NoSuchTopic" does not exist`)
	_, err = adm("topic", "delete", "--topic", "Order")
	mustCode("topic delete of a typo", err, exitNotFound, "did you mean Orders?")
	_, err = adm("offset", "show", "--group", "lagging", "--topic", "Ordres")
	mustCode("offset show of a typo", err, exitNotFound, "did you mean Orders?")
	_, err = adm("topc", "list")
	mustCode("a mistyped command", err, exitUsage, "did you mean topic?")
	_, err = adm("group", "list", "-o", "yaml")
	mustCode("an unknown output format", err, exitUsage, "want table or json")

	// Deleting a group needs --yes, which the refusal names with the effect.
	_, err = adm("group", "delete", "--group", "lagging")
	mustCode("group delete without --yes", err, exitUsage, "this would delete consumer group lagging")
	if out, err := adm("group", "delete", "--group", "lagging", "--yes"); err != nil || !strings.Contains(out, "deleted consumer group lagging") {
		t.Fatalf("group delete: %v %s", err, out)
	}
	if out, _ := adm("group", "list"); strings.Contains(out, "lagging") {
		t.Errorf("deleted group still listed:\n%s", out)
	}

	// The broker stops; its name server runs on. Every data command fails with exit 4.
	stop()
	for _, args := range [][]string{
		{"dlq", "list", "--group", "billing"},
		{"offset", "show", "--group", "billing", "--topic", "Orders"},
		{"group", "list"},
		{"topic", "list"},
		{"topic", "route", "--topic", "Orders"},
		{"cluster"},
		{"message", "find", "--topic", "Orders", "--key", "k1"},
	} {
		out, err := adm(args...)
		mustCode(strings.Join(args, " ")+" with the broker stopped", err, exitUnreachable, "no master broker registered with name server "+nsAddr)
		for _, allClear := range []string{"no dead letters", "0 consumer group(s)", "total lag"} {
			if strings.Contains(out, allClear) {
				t.Errorf("%v with the broker stopped printed %q", args, allClear)
			}
		}
	}
	ctxNS, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ns.Shutdown(ctxNS); err != nil {
		t.Fatal(err)
	}
	_, err = adm("dlq", "list", "--group", "billing")
	mustCode("dlq list with the name server stopped", err, exitUnreachable, "name server "+nsAddr)
}

func exitCodeOrZero(err error) int {
	if err == nil {
		return 0
	}
	return exitCode(err)
}
