package remoting

import (
	"strconv"
	"strings"
)

// DefaultVersion is the header "version" this package sends: 317, the MQVersion ordinal
// of V4_5_2, which is what the official Go client always sends. We copy it so that a
// Java broker or name server treats Sluice clients exactly like the Go client it has been
// tested against. Consequence: a Java 4.9.x name server answers routes in fastjson's
// non-standard form (unquoted numeric map keys) unless the request carries
// acceptStandardJsonOnly=true (docs/protocol.md §3.1, §7.7 item 14).
const DefaultVersion int16 = 317

// Flag bits of the header "flag" field (docs/protocol.md §1.2).
const (
	FlagResponse int32 = 1 << 0 // set on responses
	FlagOneway   int32 = 1 << 1 // set on one-way requests; the receiver sends no response
)

// RemotingCommand is one RocketMQ remoting frame: a request or a response
// (docs/protocol.md §1). The header fields are the JSON header keys code, language,
// version, opaque, flag, remark and extFields; Body is the frame's payload after the header.
type RemotingCommand struct {
	Code      int16             // request code ([RequestCode]) or response code ([ResponseCode])
	Language  LanguageCode      // sender language; this package sends [LanguageGo]
	Version   int16             // sender MQVersion ordinal; this package sends [DefaultVersion] (317)
	Opaque    int32             // request id; a response echoes its request's opaque
	Flag      int32             // bit0 [FlagResponse], bit1 [FlagOneway]
	Remark    string            // error text on responses; "" when absent
	ExtFields map[string]string // custom header; ALL values are strings on the wire
	// ExtList holds ext fields as an ordered list, the map-free form of the custom header
	// used on hot paths (SEND_MESSAGE_V2 and its response). A command carries its ext
	// fields in ExtFields, in ExtList, or in both:
	//   - Encoding writes ExtList in its order (no map, no sort), then the ExtFields keys
	//     sorted; a key present in both is written once, with its ExtFields value.
	//   - Decoding fills ExtFields and leaves ExtList nil, except for the codes listed in
	//     ClientConfig.ExtListCodes and ServerConfig.ExtListCodes, whose ext fields stay
	//     in ExtList in wire order (ExtFields nil), so that a parser reads them in one
	//     pass; an empty extFields object gives an empty, non-nil ExtList.
	//   - [RemotingCommand.Ext], ExtString, ExtInt64, ExtInt32, ExtBool and SetExt work
	//     on either form; code that needs the map calls [RemotingCommand.ExtMap].
	// A list may hold a key more than once (a JSON object with a repeated key): lookups
	// and ExtMap take the last, as decoding into a map does.
	ExtList []ExtField
	Body    []byte // payload, not part of the header; may be nil

	// frame is the buffer a received request was read into (Body is a slice of it), and
	// bodyReleased says its handler called ReleaseBody: see there.
	frame        []byte
	bodyReleased bool
}

// ReleaseBody tells the connection that read this request that its handler is done with
// Body: nothing keeps Body, a slice of it or anything pointing into it once the handler
// returns. The buffer the frame was read into is then reused for a later frame, which
// spares a server reading many large requests (batches) an allocation and the zeroing
// of the buffer per request. It has an effect only for requests served on the reader
// (Server.HandleInline and Server.HandleAsync handlers, which must call it before they
// return) whose frame was at most 128 KiB; elsewhere it does nothing. Header fields
// (ext fields, remark) never point into the frame: they may be kept.
func (c *RemotingCommand) ReleaseBody() { c.bodyReleased = true }

// NewRequest returns a request with the given code, ext fields and body, language GO and
// version [DefaultVersion]. ext and body are used as given (not copied); ext may be nil.
// Opaque is assigned when the request is sent.
func NewRequest(code RequestCode, ext map[string]string, body []byte) *RemotingCommand {
	return &RemotingCommand{
		Code:      int16(code),
		Language:  LanguageGo,
		Version:   DefaultVersion,
		ExtFields: ext,
		Body:      body,
	}
}

// NewResponse returns a response with the given code and remark, language GO, version
// [DefaultVersion] and the RESPONSE flag set. Opaque is filled in by the sender
// (the [Server] or [Client] copies the request's opaque).
func NewResponse(code ResponseCode, remark string) *RemotingCommand {
	return &RemotingCommand{
		Code:     int16(code),
		Language: LanguageGo,
		Version:  DefaultVersion,
		Flag:     FlagResponse,
		Remark:   remark,
	}
}

// IsResponse reports whether the RESPONSE flag bit (bit0) is set.
func (c *RemotingCommand) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// IsOneway reports whether the ONEWAY flag bit (bit1) is set.
func (c *RemotingCommand) IsOneway() bool { return c.Flag&FlagOneway != 0 }

// ResponseCode returns Code as a [ResponseCode].
func (c *RemotingCommand) ResponseCode() ResponseCode { return ResponseCode(c.Code) }

// RequestCode returns Code as a [RequestCode].
func (c *RemotingCommand) RequestCode() RequestCode { return RequestCode(c.Code) }

// ResponseErr returns nil if the command's code is SUCCESS (0), otherwise a
// [*ResponseError] with the code and remark.
func (c *RemotingCommand) ResponseErr() error {
	if c.Code == int16(Success) {
		return nil
	}
	return &ResponseError{Code: ResponseCode(c.Code), Remark: c.Remark}
}

// ResponseErrFor is [RemotingCommand.ResponseErr] for the answer to request req from the
// broker named broker ("" for a name server or when not known) at addr ("ip:port"):
// nil for SUCCESS, otherwise a [*ResponseError] carrying all four.
func (c *RemotingCommand) ResponseErrFor(req RequestCode, broker, addr string) error {
	if c.Code == int16(Success) {
		return nil
	}
	return &ResponseError{Code: ResponseCode(c.Code), Remark: c.Remark, Request: req, Broker: broker, Addr: addr}
}

// SetExt sets ext field key to value and returns c for chaining. A command in list form
// (ExtList set, ExtFields nil) stays in it: the last entry with key is replaced, or one
// is appended. Otherwise the value goes into ExtFields, which is created if needed.
func (c *RemotingCommand) SetExt(key, value string) *RemotingCommand {
	if c.ExtFields == nil && c.ExtList != nil {
		for i := len(c.ExtList) - 1; i >= 0; i-- {
			if c.ExtList[i].Key == key {
				c.ExtList[i].Value = value
				return c
			}
		}
		c.ExtList = append(c.ExtList, ExtField{Key: key, Value: value})
		return c
	}
	if c.ExtFields == nil {
		c.ExtFields = make(map[string]string, 8)
	}
	c.ExtFields[key] = value
	return c
}

// ExtString returns ext field key. A missing key gives "" and, if required, a
// [*HeaderError] naming the key. A present empty value is returned as "" without error.
func (c *RemotingCommand) ExtString(key string, required bool) (string, error) {
	v, ok := c.Ext(key)
	if !ok && required {
		return "", &HeaderError{Field: key, Reason: "required ext field is missing"}
	}
	return v, nil
}

// ExtInt64 parses ext field key as a decimal int64 (Java long). A missing or empty value
// gives 0 and, if required, a [*HeaderError]; a value that does not parse or is out of
// range gives a [*HeaderError] naming the key and the value.
func (c *RemotingCommand) ExtInt64(key string, required bool) (int64, error) {
	v, _ := c.Ext(key)
	if v == "" {
		if required {
			return 0, &HeaderError{Field: key, Reason: "required ext field is missing"}
		}
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, &HeaderError{Field: key, Reason: "value " + strconv.Quote(v) + " is not a decimal int64", Err: err}
	}
	return n, nil
}

// ExtInt32 parses ext field key as a decimal int32 (Java int, range -2147483648..2147483647).
// Missing or empty: 0 and, if required, a [*HeaderError]; unparsable or out of range: a
// [*HeaderError] naming the key and the value.
func (c *RemotingCommand) ExtInt32(key string, required bool) (int32, error) {
	v, _ := c.Ext(key)
	if v == "" {
		if required {
			return 0, &HeaderError{Field: key, Reason: "required ext field is missing"}
		}
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, &HeaderError{Field: key, Reason: "value " + strconv.Quote(v) + " is not a decimal int32", Err: err}
	}
	return int32(n), nil
}

// ExtBool parses ext field key as a Java boolean: "true" or "false" in any case.
// A missing or empty value gives false; any other value gives a [*HeaderError].
func (c *RemotingCommand) ExtBool(key string) (bool, error) {
	v, _ := c.Ext(key)
	switch {
	case v == "":
		return false, nil
	case strings.EqualFold(v, "true"):
		return true, nil
	case strings.EqualFold(v, "false"):
		return false, nil
	}
	return false, &HeaderError{Field: key, Reason: "value " + strconv.Quote(v) + ` is not "true" or "false"`}
}

// String returns a short description for logs: kind, code, opaque, flag, remark and
// body length (ext fields and body are left out).
func (c *RemotingCommand) String() string {
	var b strings.Builder
	if c.IsResponse() {
		b.WriteString("response code=")
		b.WriteString(ResponseCode(c.Code).String())
	} else {
		b.WriteString("request code=")
		b.WriteString(RequestCode(c.Code).String())
	}
	b.WriteString(" opaque=")
	b.WriteString(strconv.Itoa(int(c.Opaque)))
	b.WriteString(" flag=")
	b.WriteString(strconv.Itoa(int(c.Flag)))
	if c.Remark != "" {
		b.WriteString(" remark=")
		b.WriteString(strconv.Quote(c.Remark))
	}
	b.WriteString(" body=")
	b.WriteString(strconv.Itoa(len(c.Body)))
	b.WriteString("B")
	return b.String()
}

// VersionName returns the name Java's MQVersion.Version gives a header "version"
// ordinal: 317 is "V4_5_2" (what the official Go client 4.x sends), 407 "V4_9_7", 479
// "V5_3_3". From V4_0_0_SNAPSHOT (212) to V5_9_9 (611) the enum is regular — each
// x.y.z a _SNAPSHOT and a release, z and y from 0 to 9 — and is computed; 612 and above
// is HIGHER_VERSION, as Java clamps; an older or negative ordinal is given as its
// number ("ordinal 46").
func VersionName(v int16) string {
	switch {
	case v >= 612:
		return "HIGHER_VERSION"
	case v < 212:
		return "ordinal " + strconv.Itoa(int(v))
	}
	n := int(v) - 212
	minor, patch := n/20, n%20/2 // minors from 4.0: 4.0 .. 5.9
	name := "V" + strconv.Itoa(4+minor/10) + "_" + strconv.Itoa(minor%10) + "_" + strconv.Itoa(patch)
	if n%2 == 0 {
		name += "_SNAPSHOT"
	}
	return name
}
