package main

import (
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

// TestMessageStatusCommand asks `message status` about a message one group consumed
// and another dead-lettered, by offset id, client id and key, in text and JSON; then the
// refusals (exit 2 and 3) and, with the broker stopped, exit 4.
func TestMessageStatusCommand(t *testing.T) {
	quiet := testkit.Quiet()
	cl := startAdminCluster(t)
	ns, b := cl.ns, cl.b
	stop := cl.stop
	adm := func(args ...string) (string, error) { t.Helper(); return cl.adm(t, args...) }
	if out, err := adm("topic", "create", "--topic", "Pay", "--queues", "1"); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	c := testkit.Context(t, 60*time.Second)
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{ns.Addr()}, Group: "st-pg", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(c); err != nil {
		t.Fatal(err)
	}
	var sent []*message.SendResult
	for i := range 2 {
		r, err := p.SendSync(c, message.NewMessage("Pay", []byte("p"+strconv.Itoa(i))).SetKeys("pay-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, r)
	}
	if err := p.Shutdown(c); err != nil {
		t.Fatal(err)
	}
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	call := func(code remoting.RequestCode, ext map[string]string) {
		t.Helper()
		resp, err := rc.InvokeSync(c, b.Addr(), remoting.NewRequest(code, ext, nil))
		if err != nil || resp.ResponseErr() != nil {
			t.Fatalf("request %d: %v %v", code, err, resp)
		}
	}
	for _, g := range []string{"ledger", "mailer"} {
		call(remoting.UpdateConsumerOffset, map[string]string{"consumerGroup": g, "topic": "Pay", "queueId": "0", "commitOffset": "2"})
	}
	_, phy, _ := message.ParseOffsetMsgID(sent[1].OffsetMsgID)
	call(remoting.ConsumerSendMsgBack, map[string]string{"offset": strconv.FormatInt(phy, 10), "group": "mailer", "delayLevel": "-1",
		"originMsgId": sent[1].MsgID, "maxReconsumeTimes": "2"})
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{ns.Addr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	testkit.WaitFor(t, 20*time.Second, func() bool { // the key index is written behind the store
		ms, err := a.FindMessageByUniqKey(c, "%DLQ%mailer", sent[1].MsgID)
		return err == nil && len(ms) == 1
	}, "the dead letter in the key index")

	out, err := adm("message", "status", "--id", sent[1].OffsetMsgID)
	if err != nil || !strings.Contains(out, "of topic Pay: broker "+b.Name()+", queue 0, offset 1") ||
		!regexp.MustCompile(`(?m)^ledger +consumed +yes +2 +0 +-$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^mailer +dead-lettered +yes +2 +0 +1 \(0 re-driven\)$`).MatchString(out) {
		t.Errorf("message status --id (offset id): %v\n%s", err, out)
	}
	out, err = adm("message", "status", "--topic", "Pay", "--id", sent[0].MsgID, "--group", "mailer", "-o", "json")
	var doc struct{ Messages []admin.MessageStatus }
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Messages) != 1 || len(doc.Messages[0].Groups) != 1 ||
		doc.Messages[0].Groups[0].State != admin.StateConsumed || doc.Messages[0].Groups[0].Group != "mailer" {
		t.Errorf("message status --id (client id) --group -o json: %v %+v\n%s", err, doc, out)
	}
	if out, err := adm("message", "status", "--topic", "Pay", "--key", "pay-1"); err != nil || !regexp.MustCompile(`(?m)^mailer +dead-lettered`).MatchString(out) {
		t.Errorf("message status --key: %v\n%s", err, out)
	}

	mustCode := func(what string, err error, code int, want string) {
		t.Helper()
		if err == nil || exitCode(err) != code || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v (exit %d), want exit %d mentioning %q", what, err, exitCodeOrZero(err), code, want)
		}
	}
	_, err = adm("message", "status", "--topic", "Pay", "--key", "nosuchkey")
	mustCode("unknown key", err, exitNotFound, "no message of topic Pay has key nosuchkey")
	_, err = adm("message", "status", "--topic", "Pya", "--key", "pay-1")
	mustCode("mistyped topic", err, exitNotFound, "did you mean Pay?")
	_, err = adm("message", "status", "--topic", "Pay", "--id", "no-such-id")
	mustCode("unknown client id", err, exitNotFound, "no-such-id")
	_, err = adm("message", "status", "--id", sent[0].OffsetMsgID, "--group", "mailr")
	mustCode("mistyped group", err, exitNotFound, "did you mean mailer?")
	_, err = adm("message", "status", "--key", "pay-1")
	mustCode("--key without --topic", err, exitUsage, "--key needs --topic")
	_, err = adm("message", "status")
	mustCode("nothing named", err, exitUsage, "required")

	stop()
	out, err = adm("message", "status", "--topic", "Pay", "--key", "pay-1")
	mustCode("broker stopped", err, exitUnreachable, "no master broker registered with name server "+ns.Addr())
	if out != "" {
		t.Errorf("broker stopped: printed %q", out)
	}
}
