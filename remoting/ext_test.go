package remoting

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// header returns the header bytes of an encoded frame.
func headerOf(t *testing.T, frame []byte) string {
	t.Helper()
	cmd, _, err := DecodeFrame(frame[4:])
	if err != nil {
		t.Fatal(err)
	}
	return string(frame[8 : len(frame)-len(cmd.Body)])
}

func TestExtListEncodesInOrder(t *testing.T) {
	c := NewRequest(SendMessageV2, nil, []byte("b"))
	c.ExtList = []ExtField{{"z", "1"}, {"a", "<2>"}, {"m", ""}}
	f, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if h := headerOf(t, f); !strings.HasSuffix(h, `"extFields":{"z":"1","a":"\u003c2\u003e","m":""}}`) {
		t.Fatalf("list not written in order: %s", h)
	}
	// Both forms: the list in order, then the map sorted; a key in both is written once
	// with the map's value.
	c.ExtFields = map[string]string{"y": "Y", "a": "A", "b": "B"}
	f, err = c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if h := headerOf(t, f); !strings.HasSuffix(h, `"extFields":{"z":"1","m":"","a":"A","b":"B","y":"Y"}}`) {
		t.Fatalf("list and map: %s", h)
	}
	// An empty list is an empty object (not null), as an empty map is.
	c.ExtFields, c.ExtList = nil, []ExtField{}
	f, _ = c.Encode()
	if h := headerOf(t, f); !strings.HasSuffix(h, `"extFields":{}}`) {
		t.Fatalf("empty list: %s", h)
	}
	c.ExtList = nil
	f, _ = c.Encode()
	if h := headerOf(t, f); !strings.HasSuffix(h, `"extFields":null}`) {
		t.Fatalf("no ext fields: %s", h)
	}
}

func TestExtListBinaryInOrder(t *testing.T) {
	c := NewRequest(SendMessageV2, map[string]string{"a": "A"}, nil)
	c.ExtList = []ExtField{{"z", "1"}, {"a", "shadowed"}, {"b", "2"}}
	f, err := c.EncodeBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := DecodeFrameExtList(f[4:])
	if err != nil {
		t.Fatal(err)
	}
	want := []ExtField{{"z", "1"}, {"b", "2"}, {"a", "A"}}
	if !reflect.DeepEqual(got.ExtList, want) || got.ExtFields != nil {
		t.Fatalf("binary list = %v (map %v), want %v", got.ExtList, got.ExtFields, want)
	}
	c.ExtList[0].Key = strings.Repeat("k", 1<<15)
	var he *HeaderError
	if _, err := c.EncodeBinary(); !errors.As(err, &he) || he.Field != "extFields" {
		t.Fatalf("oversized list key: %v", err)
	}
}

// extFrames are frames whose ext fields must decode the same in both forms: our JSON
// and binary encodings, Java's sorted JSON, escapes, a repeated key, an empty and a
// null object, and a header only encoding/json decodes (the fast parser's fallback).
func extFrames(t *testing.T) [][]byte {
	var frames [][]byte
	for _, c := range []*RemotingCommand{sampleCommand(), NewRequest(HeartBeat, nil, nil), NewRequest(HeartBeat, map[string]string{}, nil)} {
		j, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.EncodeBinary()
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, j[4:], b[4:])
	}
	for _, h := range []string{
		`{"code":0,"extFields":{"b":"1","a":"2"},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}`,
		`{"code":310,"extFields":{"i":"TAGS\u0001a\u0002KEYS\u0001\u00e9\ud83d\ude00","a":"x\"y"}}`,
		`{"code":310,"extFields":{"a":"1","b":"2","a":"3"}}`,
		`{"code":310,"extFields":{}}`,
		`{"code":310,"extFields":null}`,
		`{"code":310,"extFields":{"a":"1","b":"2"},"other":[1,{"x":2}]}`,
	} {
		frames = append(frames, jsonFrame(h, []byte("body")))
	}
	return frames
}

func TestDecodeFrameExtListMatchesMap(t *testing.T) {
	for _, f := range extFrames(t) {
		m, stM, errM := DecodeFrame(f)
		l, stL, errL := DecodeFrameExtList(f)
		if errM != nil || errL != nil || stM != stL {
			t.Fatalf("%q: %v / %v", f, errM, errL)
		}
		if l.ExtFields != nil {
			t.Fatalf("%q: list form has a map %v", f, l.ExtFields)
		}
		if (m.ExtFields == nil) != (l.ExtList == nil) {
			t.Fatalf("%q: map %v, list %v (nil-ness differs)", f, m.ExtFields, l.ExtList)
		}
		for k, v := range m.ExtFields {
			if got, ok := l.Ext(k); !ok || got != v {
				t.Fatalf("%q: Ext(%q) = %q %v, map has %q", f, k, got, ok, v)
			}
		}
		if _, ok := l.Ext("no such key"); ok {
			t.Fatal("absent key found")
		}
		l.ExtMap()
		if l.ExtList != nil || !reflect.DeepEqual(l, m) {
			t.Fatalf("%q: ExtMap gives\n%#v\nDecodeFrame gives\n%#v", f, l, m)
		}
	}
}

func TestDecodeFrameExtListErrors(t *testing.T) {
	for _, f := range [][]byte{
		nil, {0, 0}, {0, 0, 0, 9, '{', '}'}, {7, 0, 0, 2, '{', '}'},
		jsonFrame(`{"code":1,"extFields":{"a":1}}x`, nil),
		jsonFrame(`{"code":1,"extFields":{"a":"1"`, nil),
		jsonFrame(` `, nil),
		binFrame(binHeader(0, nil, []byte{0, 5, 'a'})),
		binFrame(binHeader(0, nil, []byte{0xff, 0xff, 'a'})),
	} {
		_, _, errM := DecodeFrame(f)
		cmd, _, errL := DecodeFrameExtList(f)
		if errL == nil || cmd != nil {
			t.Fatalf("%q: list decode gave %v, %v", f, cmd, errL)
		}
		if errM == nil || errM.Error() != errL.Error() {
			t.Fatalf("%q: map decode %v, list decode %v", f, errM, errL)
		}
		var fe *FrameError
		var he *HeaderError
		if !errors.As(errL, &fe) && !errors.As(errL, &he) {
			t.Fatalf("%q: untyped error %v", f, errL)
		}
	}
}

func TestExtListAccessors(t *testing.T) {
	c := &RemotingCommand{ExtList: []ExtField{{"n", "1"}, {"n", "42"}, {"b", "TRUE"}, {"e", ""}, {"bad", "x"}}}
	if v, err := c.ExtInt32("n", true); err != nil || v != 42 {
		t.Fatalf("repeated key: %d %v, want the last (42)", v, err)
	}
	if v, err := c.ExtInt64("n", true); err != nil || v != 42 {
		t.Fatalf("ExtInt64 = %d %v", v, err)
	}
	if v, err := c.ExtBool("b"); err != nil || !v {
		t.Fatalf("ExtBool = %v %v", v, err)
	}
	if v, err := c.ExtString("e", true); err != nil || v != "" {
		t.Fatalf("present empty value: %q %v", v, err)
	}
	var he *HeaderError
	if _, err := c.ExtString("missing", true); !errors.As(err, &he) || he.Field != "missing" {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := c.ExtInt32("bad", false); !errors.As(err, &he) || he.Field != "bad" {
		t.Fatalf("bad int: %v", err)
	}
	// SetExt stays in list form: it replaces the last entry of a key or appends.
	c.SetExt("n", "7").SetExt("new", "v")
	if c.ExtFields != nil || c.ExtList[1] != (ExtField{"n", "7"}) || c.ExtList[len(c.ExtList)-1] != (ExtField{"new", "v"}) {
		t.Fatalf("SetExt on a list: %v %v", c.ExtList, c.ExtFields)
	}
	// The map wins over the list, for lookups as for encoding.
	c.ExtFields = map[string]string{"n": "9"}
	if v, _ := c.Ext("n"); v != "9" {
		t.Fatalf("map value not preferred: %q", v)
	}
	m := c.ExtMap()
	want := map[string]string{"n": "9", "b": "TRUE", "e": "", "bad": "x", "new": "v"}
	if !reflect.DeepEqual(m, want) || c.ExtList != nil || !reflect.DeepEqual(c.ExtFields, want) {
		t.Fatalf("ExtMap = %v (list %v), want %v", m, c.ExtList, want)
	}
	if (&RemotingCommand{}).ExtMap() != nil {
		t.Fatal("ExtMap of a command without ext fields is not nil")
	}
}

// TestSignListForm: a request in list form is signed over all its fields, and a
// verifier accepts it in either form.
func TestSignListForm(t *testing.T) {
	cr := Credentials{AccessKey: "ak", SecretKey: "sk"}
	list := NewRequest(SendMessageV2, nil, []byte("body"))
	list.ExtList = []ExtField{{"a", "g"}, {"b", "T"}}
	cr.Sign(list)
	mapped := NewRequest(SendMessageV2, map[string]string{"a": "g", "b": "T"}, []byte("body"))
	cr.Sign(mapped)
	if list.ExtFields[ExtSignature] == "" || list.ExtFields[ExtSignature] != mapped.ExtFields[ExtSignature] {
		t.Fatalf("list-form signature %q, map-form %q", list.ExtFields[ExtSignature], mapped.ExtFields[ExtSignature])
	}
	f, _ := list.Encode()
	got, _, err := DecodeFrameExtList(f[4:])
	if err != nil {
		t.Fatal(err)
	}
	if !VerifySignature("sk", got) || VerifySignature("other", got) {
		t.Fatal("list-form request does not verify with its key only")
	}
}

// TestExtListCodesOverTheWire: the server hands the codes of ServerConfig.ExtListCodes to
// its handler in list form (wire order) and the others as maps; the client does the same
// for the responses to the codes of ClientConfig.ExtListCodes.
func TestExtListCodesOverTheWire(t *testing.T) {
	type seen struct {
		list []ExtField
		m    map[string]string
	}
	got := make(chan seen, 4)
	s := startServer(t, ServerConfig{ExtListCodes: []RequestCode{SendMessageV2}})
	h := func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		got <- seen{req.ExtList, req.ExtFields}
		r := NewResponse(Success, "")
		r.ExtList = []ExtField{{"queueOffset", "7"}, {"msgId", "X"}}
		return r
	}
	s.Handle(SendMessageV2, h)
	s.HandleInline(SendMessage, h)
	c := newClient(t, ClientConfig{ExtListCodes: []RequestCode{SendMessageV2}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	req := NewRequest(SendMessageV2, nil, nil)
	req.ExtList = []ExtField{{"b", "T"}, {"a", "g"}}
	resp, err := c.InvokeSync(ctx, s.Addr(), req)
	if err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.m != nil || !reflect.DeepEqual(g.list, []ExtField{{"b", "T"}, {"a", "g"}}) {
		t.Fatalf("listed request reached the handler as %v / %v", g.list, g.m)
	}
	if resp.ExtFields != nil || !reflect.DeepEqual(resp.ExtList, []ExtField{{"queueOffset", "7"}, {"msgId", "X"}}) {
		t.Fatalf("listed response: %v / %v", resp.ExtList, resp.ExtFields)
	}

	req = NewRequest(SendMessage, nil, nil)
	req.ExtList = []ExtField{{"b", "T"}}
	resp, err = c.InvokeSync(ctx, s.Addr(), req)
	if err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.list != nil || !reflect.DeepEqual(g.m, map[string]string{"b": "T"}) {
		t.Fatalf("unlisted request reached the handler as %v / %v", g.list, g.m)
	}
	if resp.ExtList != nil || !reflect.DeepEqual(resp.ExtFields, map[string]string{"queueOffset": "7", "msgId": "X"}) {
		t.Fatalf("unlisted response: %v / %v", resp.ExtList, resp.ExtFields)
	}

	// InvokeAsyncTimeout answers in list form too.
	done := make(chan *RemotingCommand, 1)
	req = NewRequest(SendMessageV2, nil, nil)
	req.ExtList = []ExtField{{"a", "g"}}
	if err := c.InvokeAsyncTimeout(ctx, s.Addr(), req, 5*time.Second, func(r *RemotingCommand, err error) {
		if err != nil {
			t.Error(err)
		}
		done <- r
	}); err != nil {
		t.Fatal(err)
	}
	<-got
	select {
	case r := <-done:
		if r == nil || r.ExtFields != nil || len(r.ExtList) != 2 {
			t.Fatalf("async listed response: %v", r)
		}
	case <-ctx.Done():
		t.Fatal("no async answer")
	}
}

// TestInvokeAsyncTimeoutContextEnds: the sweep fails a call whose context ends before
// its timeout, with the context's error.
func TestInvokeAsyncTimeoutContextEnds(t *testing.T) {
	s := startServer(t, ServerConfig{})
	release := make(chan struct{})
	s.Handle(SendMessageV2, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return NewResponse(Success, "")
	})
	defer close(release)
	c := newClient(t, ClientConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	if err := c.InvokeAsyncTimeout(ctx, s.Addr(), NewRequest(SendMessageV2, nil, nil), time.Minute, func(_ *RemotingCommand, err error) {
		errc <- err
	}); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call failed with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled call not failed within 10s")
	}
}
