package remoting

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestExtGetters(t *testing.T) {
	c := NewRequest(PullMessage, nil, nil)
	c.SetExt("topic", "T").SetExt("queueId", "3").SetExt("queueOffset", "-9223372036854775808").
		SetExt("big", "2147483648").SetExt("bad", "12x").SetExt("t", "TRUE").SetExt("f", "false").
		SetExt("empty", "").SetExt("yes", "yes")

	if v, err := c.ExtString("topic", true); err != nil || v != "T" {
		t.Fatal(v, err)
	}
	if v, err := c.ExtString("empty", true); err != nil || v != "" {
		t.Fatal("present empty value must be accepted:", v, err)
	}
	if v, err := c.ExtString("missing", false); err != nil || v != "" {
		t.Fatal(v, err)
	}
	if v, err := c.ExtInt32("queueId", true); err != nil || v != 3 {
		t.Fatal(v, err)
	}
	if v, err := c.ExtInt64("queueOffset", true); err != nil || v != -1<<63 {
		t.Fatal(v, err)
	}
	if v, err := c.ExtInt64("missing", false); err != nil || v != 0 {
		t.Fatal(v, err)
	}
	if v, err := c.ExtInt64("empty", false); err != nil || v != 0 {
		t.Fatal(v, err)
	}
	if v, err := c.ExtBool("t"); err != nil || !v {
		t.Fatal(v, err)
	}
	if v, err := c.ExtBool("f"); err != nil || v {
		t.Fatal(v, err)
	}
	if v, err := c.ExtBool("missing"); err != nil || v {
		t.Fatal(v, err)
	}

	errCases := []struct {
		name  string
		field string
		call  func() error
		in    []string // substrings the message must contain
	}{
		{"required string", "missing", func() error { _, err := c.ExtString("missing", true); return err }, []string{"missing"}},
		{"required int64", "missing", func() error { _, err := c.ExtInt64("missing", true); return err }, []string{"missing"}},
		{"required int32 empty", "empty", func() error { _, err := c.ExtInt32("empty", true); return err }, []string{"missing"}},
		{"int32 overflow", "big", func() error { _, err := c.ExtInt32("big", false); return err }, []string{"2147483648", "int32"}},
		{"int64 syntax", "bad", func() error { _, err := c.ExtInt64("bad", false); return err }, []string{"12x", "int64"}},
		{"bool syntax", "yes", func() error { _, err := c.ExtBool("yes"); return err }, []string{"yes"}},
	}
	for _, tc := range errCases {
		err := tc.call()
		var he *HeaderError
		if !errors.As(err, &he) || he.Field != tc.field {
			t.Fatalf("%s: want *HeaderError for %q, got %T %v", tc.name, tc.field, err, err)
		}
		for _, s := range append(tc.in, strconv.Quote(tc.field)) {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("%s: error %q does not mention %q", tc.name, err, s)
			}
		}
	}
	var ne *strconv.NumError
	if _, err := c.ExtInt32("big", false); !errors.As(err, &ne) {
		t.Fatalf("HeaderError should wrap the strconv error: %v", err)
	}
}

func TestConstructorsAndFlags(t *testing.T) {
	req := NewRequest(SendMessage, map[string]string{"a": "b"}, []byte("x"))
	if req.Code != 10 || req.Language != LanguageGo || req.Version != 317 || req.Flag != 0 || req.IsResponse() || req.IsOneway() {
		t.Fatalf("request %#v", req)
	}
	if req.RequestCode() != SendMessage {
		t.Fatal(req.RequestCode())
	}
	resp := NewResponse(TopicNotExist, "no route")
	if !resp.IsResponse() || resp.ResponseCode() != TopicNotExist || resp.Remark != "no route" {
		t.Fatalf("response %#v", resp)
	}
	if NewResponse(Success, "").ResponseErr() != nil {
		t.Fatal("success must not be an error")
	}
	if err := resp.ResponseErr(); err == nil || !strings.Contains(err.Error(), "TOPIC_NOT_EXIST") || !strings.Contains(err.Error(), "no route") {
		t.Fatalf("ResponseErr: %v", err)
	}
	if s := resp.String(); !strings.Contains(s, "TOPIC_NOT_EXIST") || !strings.Contains(s, "no route") {
		t.Fatalf("String: %s", s)
	}
}

func TestCodeNames(t *testing.T) {
	for code, want := range map[RequestCode]string{SendMessage: "SEND_MESSAGE", GetRouteInfoByTopic: "GET_ROUTEINFO_BY_TOPIC",
		PushReplyMessageToClient: "PUSH_REPLY_MESSAGE_TO_CLIENT", RequestCode(999): "RequestCode(999)"} {
		if code.String() != want {
			t.Fatalf("%d: %s, want %s", code, code.String(), want)
		}
	}
	for code, want := range map[ResponseCode]string{Success: "SUCCESS", FlowControl: "FLOW_CONTROL",
		TransactionStateUnknown: "TRANSACTION_STATE_UNKNOW", ResponseCode(-3): "ResponseCode(-3)"} {
		if code.String() != want {
			t.Fatalf("%d: %s, want %s", code, code.String(), want)
		}
	}
	retry := map[ResponseCode]bool{SystemError: true, SystemBusy: true, ServiceNotAvailable: true, NoPermission: true, TopicNotExist: true}
	for code := range responseCodeNames {
		if code.Retryable() != retry[code] {
			t.Fatalf("%v.Retryable() = %v", code, code.Retryable())
		}
	}
	if LanguageGo.String() != "GO" || LanguageCode(99).String() != "LanguageCode(99)" {
		t.Fatal("language names")
	}
	if ParseLanguageCode("Rust") != LanguageRust || ParseLanguageCode("cobol") != LanguageOther {
		t.Fatal("ParseLanguageCode")
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []ClientConfig{{DialTimeout: -1}, {MaxFrameSize: -1}, {MaxFrameSize: 10}, {WriteTimeout: -time.Second},
		{WriteQueueSize: -1}, {IdleTimeout: -1}}
	for _, cfg := range bad {
		if _, err := NewClient(cfg); err == nil {
			t.Fatalf("NewClient(%+v) accepted", cfg)
		}
	}
	badS := []ServerConfig{{MaxFrameSize: -1}, {MaxFrameSize: 63}, {MaxInFlightPerConn: -1}, {WriteTimeout: -1}, {WriteQueueSize: -1}}
	for _, cfg := range badS {
		if _, err := NewServer(cfg); err == nil {
			t.Fatalf("NewServer(%+v) accepted", cfg)
		}
	}
	var cc ClientConfig
	cc.setDefaults()
	if cc.DialTimeout != 3*time.Second || cc.MaxFrameSize != DefaultMaxFrameSize || cc.WriteTimeout != 10*time.Second || cc.Logger == nil {
		t.Fatalf("client defaults %+v", cc)
	}
	var sc ServerConfig
	sc.setDefaults()
	if sc.MaxInFlightPerConn != 1024 || sc.IdleTimeout != 120*time.Second || sc.WriteTimeout != 10*time.Second || sc.Addr == "" {
		t.Fatalf("server defaults %+v", sc)
	}
	s, err := NewServer(ServerConfig{Addr: "256.0.0.1:bad", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start on a bad address succeeded")
	}
	if err := s.Shutdown(ctxTimeout(t, time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestVersionName checks VersionName against names of Java's MQVersion.Version read
// from rocketmq-common 5.3.3 (javap of the enum; its ordinals are the header's version).
func TestVersionName(t *testing.T) {
	for v, want := range map[int16]string{
		212: "V4_0_0_SNAPSHOT", 213: "V4_0_0", 244: "V4_1_6_SNAPSHOT", 272: "V4_3_0_SNAPSHOT", 280: "V4_3_4_SNAPSHOT",
		317: "V4_5_2", 342: "V4_6_5_SNAPSHOT", 406: "V4_9_7_SNAPSHOT", 407: "V4_9_7", 413: "V5_0_0",
		442: "V5_1_5_SNAPSHOT", 453: "V5_2_0", 465: "V5_2_6", 479: "V5_3_3", 503: "V5_4_5", 545: "V5_6_6",
		601: "V5_9_4", 603: "V5_9_5", 611: "V5_9_9", 612: "HIGHER_VERSION", 32767: "HIGHER_VERSION",
		211: "ordinal 211", 0: "ordinal 0", -1: "ordinal -1",
	} {
		if got := VersionName(v); got != want {
			t.Errorf("VersionName(%d) = %q, want %q", v, got, want)
		}
	}
}
