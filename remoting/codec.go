package remoting

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// DefaultMaxFrameSize is the default largest frame accepted, in bytes, counting the 4-byte
// length field: 16 MiB, Java's com.rocketmq.remoting.frameMaxLength default (16777216).
const DefaultMaxFrameSize = 16 << 20

// maxHeaderLen is the largest header the 24-bit header-length field can express.
const maxHeaderLen = 1<<24 - 1

// MaxExtFields is the most ext fields a received header may carry (JSON or binary,
// repeated keys counted each time): a header with more is refused with a
// [*HeaderError] (Field "extFields") before they are collected. RocketMQ's requests
// carry a few dozen at most; the limit keeps a header of millions of tiny or repeated
// fields from costing many times its size in memory. Sluice's own limit, not
// RocketMQ's.
const MaxExtFields = 1024

// maxFallbackHeader is the largest JSON header decoded with encoding/json, which the
// rare headers the fast path does not take (null or numeric values, keys needing case
// folding) go to: its memory is a multiple of the header's size.
const maxFallbackHeader = 64 << 10

func tooManyExtFields() error {
	return &HeaderError{Field: "extFields", Reason: fmt.Sprintf("more than %d fields (MaxExtFields)", MaxExtFields)}
}

// SerializeType selects the header encoding; it is the top byte of the 4-byte
// header-length field (docs/protocol.md §1.1).
type SerializeType byte

const (
	// SerializeJSON is the JSON header (serialize type 0), the Go client's only choice and
	// the Java default.
	SerializeJSON SerializeType = 0
	// SerializeRocketMQ is the ROCKETMQ binary header (serialize type 1, docs/protocol.md §1.3).
	SerializeRocketMQ SerializeType = 1
)

// String returns "JSON", "ROCKETMQ" or "SerializeType(n)".
func (t SerializeType) String() string {
	switch t {
	case SerializeJSON:
		return "JSON"
	case SerializeRocketMQ:
		return "ROCKETMQ"
	}
	return "SerializeType(" + strconv.Itoa(int(t)) + ")"
}

// Encode returns the full frame with a JSON header (serialize type 0):
// [4-byte length][4-byte type<<24|headerLen][JSON header][body], big-endian.
// The header keys are written in the Go client's order
// (code, language, version, opaque, flag, remark, extFields), numbers as JSON numbers,
// language as its name, ext values as JSON strings; string escaping matches
// encoding/json (control characters and <, >, & as \u00XX; invalid UTF-8 becomes U+FFFD).
// It fails with a [*FrameError] if the header exceeds 16 MiB-1 or the frame exceeds 2 GiB-1.
func (c *RemotingCommand) Encode() ([]byte, error) {
	buf := frameBuf(8+160+len(c.Remark)+c.extSizeHint()+len(c.Body), true)
	buf = c.appendJSONHeader(buf)
	return finishFrame(buf, SerializeJSON, c.Body)
}

// EncodeBinary returns the full frame with a ROCKETMQ binary header (serialize type 1,
// docs/protocol.md §1.3). Ext fields are written in sorted key order. It fails with a
// [*HeaderError] for an ext key longer than 32767 bytes and a [*FrameError] for an
// oversized header or frame.
func (c *RemotingCommand) EncodeBinary() ([]byte, error) { return c.encodeBinary(false) }

// encodeBinaryRequest is EncodeBinary for a request a client sends: ext fields with an
// empty value are left out. RocketMQ's binary decoder (4.9.x RocketMQSerializable)
// reads a zero-length value as null, which for its request headers is an absent field;
// but its ACL check (PlainAccessValidator) appends a null value to the signed content
// as the text "null", where the client signed nothing, and refuses the request. Left
// out, the field is absent on every server, and the signature (over the values, where
// an empty one adds nothing) is unchanged.
func (c *RemotingCommand) encodeBinaryRequest() ([]byte, error) { return c.encodeBinary(true) }

func (c *RemotingCommand) encodeBinary(skipEmpty bool) ([]byte, error) {
	buf := frameBuf(8+25+len(c.Remark)+c.extSizeHint()+len(c.Body), true)
	var err error
	buf, err = c.appendBinaryHeader(buf, skipEmpty)
	if err != nil {
		return nil, err
	}
	return finishFrame(buf, SerializeRocketMQ, c.Body)
}

// EncodeAs encodes with the given serialize type ([Encode] or [EncodeBinary]).
func (c *RemotingCommand) EncodeAs(t SerializeType) ([]byte, error) {
	if t == SerializeRocketMQ {
		return c.EncodeBinary()
	}
	return c.Encode()
}

// maxPooledFrame is the largest frame buffer (capacity, bytes) that is recycled.
const maxPooledFrame = 128 << 10

// frameClassMax are the upper capacity bounds (bytes) of the size classes of recycled
// frame buffers: a frame of n bytes takes a buffer from n's class, so a buffer is at
// most 4 times (1 KiB for the smallest class) the frame it holds — a little more for an
// encoded frame, whose class comes from an estimate up to 160 bytes above its size (at
// most 4.5 times at a class boundary). The outgoing queue's
// byte limits count frame lengths, so this also bounds how much more than those limits
// a stuck connection's queue can hold.
var frameClassMax = [...]int{1 << 10, 4 << 10, 16 << 10, 64 << 10, maxPooledFrame}

// framePools hold frame buffers, by size class, that a connection's writer has written
// (Conn.writeLoop recycles every frame of its outgoing queue, which owns them), for the
// next Encode.
var framePools [len(frameClassMax)]sync.Pool // of *[]byte

// frameBoxes holds the emptied *[]byte boxes of the buffers frameBuf took out of
// framePools, for recycleFrame to put the next buffer in: a recycled frame costs no
// allocation of its box (a []byte header, 24 bytes, moved to the heap per frame).
var frameBoxes sync.Pool // of *[]byte, each holding nil

// frameClass returns the size class of a frame or buffer of n bytes (n <= maxPooledFrame).
func frameClass(n int) int {
	for i, m := range frameClassMax {
		if n <= m {
			return i
		}
	}
	return len(frameClassMax) - 1
}

// frameBuf returns a buffer of length 8 (the frame prefix, filled in by finishFrame)
// with room for n bytes: a recycled one when its size class has one. A new buffer gets
// its class's whole capacity when n is within the smallest class or whole is set, so
// that once recycled it serves any later frame of the class. Encoding sets whole (its
// frames go to a connection's writer, which recycles them); reading does not, because
// a received frame may be held for long (a pull response's messages alias it).
func frameBuf(n int, whole bool) []byte {
	if n <= maxPooledFrame {
		c := frameClass(n)
		pool := &framePools[c]
		if p, _ := pool.Get().(*[]byte); p != nil {
			if b := *p; cap(b) >= n {
				*p = nil // the box keeps no buffer alive
				frameBoxes.Put(p)
				return b[:8]
			}
			pool.Put(p) // too small for this frame, not for the next one
		}
		if whole || c == 0 {
			n = frameClassMax[c]
		}
		return make([]byte, 8, n)
	}
	return make([]byte, 8, n)
}

// recycleFrame gives a written frame's buffer back to its size class. The caller must
// own the frame and hold no other reference to it.
func recycleFrame(f []byte) {
	if cap(f) >= 64 && cap(f) <= maxPooledFrame {
		p, _ := frameBoxes.Get().(*[]byte)
		if p == nil {
			p = new([]byte)
		}
		*p = f
		framePools[frameClass(cap(f))].Put(p)
	}
}

func (c *RemotingCommand) extSizeHint() int {
	n := 0
	for k, v := range c.ExtFields {
		n += len(k) + len(v) + 8
	}
	for _, f := range c.ExtList {
		n += len(f.Key) + len(f.Value) + 8
	}
	return n
}

// finishFrame fills in the 8-byte prefix of buf (whose header starts at 8) and appends body.
func finishFrame(buf []byte, t SerializeType, body []byte) ([]byte, error) {
	headerLen := len(buf) - 8
	if headerLen > maxHeaderLen {
		return nil, &FrameError{Field: "headerLength", Reason: fmt.Sprintf("header is %d bytes, limit %d", headerLen, maxHeaderLen)}
	}
	total := int64(4) + int64(headerLen) + int64(len(body))
	if total > math.MaxInt32 {
		return nil, &FrameError{Field: "length", Reason: fmt.Sprintf("frame is %d bytes, limit %d", total, math.MaxInt32)}
	}
	binary.BigEndian.PutUint32(buf[0:4], uint32(total))
	binary.BigEndian.PutUint32(buf[4:8], uint32(t)<<24|uint32(headerLen))
	return append(buf, body...), nil
}

func (c *RemotingCommand) appendJSONHeader(b []byte) []byte {
	b = append(b, `{"code":`...)
	b = strconv.AppendInt(b, int64(c.Code), 10)
	b = append(b, `,"language":`...)
	lang, _ := c.Language.MarshalJSON()
	b = append(b, lang...)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, int64(c.Version), 10)
	b = append(b, `,"opaque":`...)
	b = strconv.AppendInt(b, int64(c.Opaque), 10)
	b = append(b, `,"flag":`...)
	b = strconv.AppendInt(b, int64(c.Flag), 10)
	b = append(b, `,"remark":`...)
	b = appendJSONString(b, c.Remark)
	b = append(b, `,"extFields":`...)
	if !c.hasExt() {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		start := len(b)
		for _, f := range c.ExtList {
			if c.listShadowed(f) {
				continue
			}
			if len(b) > start {
				b = append(b, ',')
			}
			b = appendJSONString(b, f.Key)
			b = append(b, ':')
			b = appendJSONString(b, f.Value)
		}
		if len(c.ExtFields) > 0 {
			var kb [32]string
			for _, k := range sortedKeys(kb[:0], c.ExtFields) {
				if len(b) > start {
					b = append(b, ',')
				}
				b = appendJSONString(b, k)
				b = append(b, ':')
				b = appendJSONString(b, c.ExtFields[k])
			}
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// sortedKeys appends m's keys to dst and sorts them. Callers pass a stack array's slice
// (a request header has a dozen fields), so encoding a header allocates no key slice.
func sortedKeys(dst []string, m map[string]string) []string {
	for k := range m {
		dst = append(dst, k)
	}
	slices.Sort(dst)
	return dst
}

const hexDigits = "0123456789abcdef"

// jsonSafe[c] reports whether ASCII byte c is written as is in a JSON string (not a
// control character, quote, backslash or one of encoding/json's HTML escapes <, >, &).
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendJSONString appends s as a JSON string with encoding/json's escaping (HTML-safe).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendBinaryHeader appends c's binary header to b, without the ext fields whose value
// is empty when skipEmpty.
func (c *RemotingCommand) appendBinaryHeader(b []byte, skipEmpty bool) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, uint16(c.Code))
	b = append(b, byte(c.Language))
	b = binary.BigEndian.AppendUint16(b, uint16(c.Version))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Opaque))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Flag))
	if len(c.Remark) > maxHeaderLen {
		return nil, &HeaderError{Field: "remark", Reason: fmt.Sprintf("remark is %d bytes, limit %d", len(c.Remark), maxHeaderLen)}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Remark)))
	b = append(b, c.Remark...)
	lenPos := len(b)
	b = append(b, 0, 0, 0, 0)
	var err error
	for _, f := range c.ExtList {
		if c.listShadowed(f) || skipEmpty && f.Value == "" {
			continue
		}
		if b, err = appendBinaryExt(b, f.Key, f.Value); err != nil {
			return nil, err
		}
	}
	if len(c.ExtFields) > 0 {
		var kb [32]string
		for _, k := range sortedKeys(kb[:0], c.ExtFields) {
			v := c.ExtFields[k]
			if skipEmpty && v == "" {
				continue
			}
			if b, err = appendBinaryExt(b, k, v); err != nil {
				return nil, err
			}
		}
	}
	binary.BigEndian.PutUint32(b[lenPos:], uint32(len(b)-lenPos-4))
	return b, nil
}

// appendBinaryExt appends one ext field of a binary header: 2-byte key length, key,
// 4-byte value length, value (docs/protocol.md §1.3).
func appendBinaryExt(b []byte, k, v string) ([]byte, error) {
	if len(k) > math.MaxInt16 {
		return nil, &HeaderError{Field: "extFields", Reason: fmt.Sprintf("key of %d bytes exceeds the binary header limit %d", len(k), math.MaxInt16)}
	}
	if len(b)+len(k)+len(v) > maxHeaderLen+8 {
		return nil, &FrameError{Field: "headerLength", Reason: fmt.Sprintf("header exceeds %d bytes", maxHeaderLen)}
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
	b = append(b, k...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...), nil
}

// DecodeFrame decodes one frame given WITHOUT its leading 4-byte length field (as
// returned by [ReadFrame]): [type<<24|headerLen][header][body]. It accepts JSON headers
// as written by Java (fastjson: sorted keys, extra keys such as serializeTypeCurrentRPC,
// no remark) and by the Go client, and ROCKETMQ binary headers. Ext fields go into
// ExtFields (nil when the header has none). The returned Body aliases frame; the header
// strings do not. Errors: [*FrameError] for a frame shorter than 4 bytes, a header
// length beyond the frame or an unknown serialize type; [*HeaderError] for an invalid
// header, one with more than [MaxExtFields] ext fields, or a JSON header over 64 KiB that
// only the general JSON decoder takes (null or numeric values, case-folded keys).
func DecodeFrame(frame []byte) (*RemotingCommand, SerializeType, error) {
	var buf [16]ExtField
	cmd, st, ext, hasExt, err := decodeFrameExt(frame, buf[:0])
	if err != nil {
		return nil, st, err
	}
	if hasExt {
		cmd.ExtFields = extMapOf(ext)
	}
	return cmd, st, nil
}

// DecodeFrameExtList is [DecodeFrame] with the ext fields left in ExtList, in wire order
// (ExtFields nil; an empty, non-nil ExtList when the header has an empty extFields
// object): no map is built. [RemotingCommand.ExtMap] gives the map DecodeFrame would
// have returned. Same errors as DecodeFrame.
func DecodeFrameExtList(frame []byte) (*RemotingCommand, SerializeType, error) {
	var buf [16]ExtField
	cmd, st, ext, hasExt, err := decodeFrameExt(frame, buf[:0])
	if err != nil {
		return nil, st, err
	}
	if hasExt {
		cmd.ExtList = extListOf(ext)
	}
	return cmd, st, nil
}

// decodeFrameExt decodes frame as DecodeFrame does, except that the ext fields are
// appended to ext (in wire order; from encoding/json's map, the rare fallback, in
// sorted key order) and neither ExtFields nor ExtList is set; hasExt reports whether the
// header has an extFields object. The returned list aliases ext's array (a caller's
// scratch buffer): the caller copies what it keeps.
func decodeFrameExt(frame []byte, ext []ExtField) (*RemotingCommand, SerializeType, []ExtField, bool, error) {
	if len(frame) < 4 {
		return nil, 0, ext, false, &FrameError{Field: "length", Reason: fmt.Sprintf("frame of %d bytes is shorter than the 4-byte header-length field", len(frame))}
	}
	x := binary.BigEndian.Uint32(frame)
	st := SerializeType(x >> 24)
	headerLen := int(x & maxHeaderLen)
	if headerLen > len(frame)-4 {
		return nil, st, ext, false, &FrameError{Field: "headerLength", Reason: fmt.Sprintf("header length %d exceeds the %d bytes left in the frame", headerLen, len(frame)-4)}
	}
	header := frame[4 : 4+headerLen]
	var (
		cmd    *RemotingCommand
		hasExt bool
		err    error
	)
	switch st {
	case SerializeJSON:
		cmd, ext, hasExt, err = decodeJSONHeader(header, ext)
	case SerializeRocketMQ:
		cmd, ext, hasExt, err = decodeBinaryHeader(header, ext)
	default:
		return nil, st, ext, false, &FrameError{Field: "serializeType", Reason: fmt.Sprintf("unknown serialize type %d (want 0 JSON or 1 ROCKETMQ)", byte(st))}
	}
	if err != nil {
		return nil, st, ext, false, err
	}
	if body := frame[4+headerLen:]; len(body) > 0 {
		// Capacity ends with the frame: a recycled buffer's tail holds an earlier frame.
		cmd.Body = body[:len(body):len(body)]
	}
	return cmd, st, ext, hasExt, nil
}

type jsonHeader struct {
	Code      int16             `json:"code"`
	Language  LanguageCode      `json:"language"`
	Version   int16             `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    string            `json:"remark"`
	ExtFields map[string]string `json:"extFields"`
}

// decodeJSONHeader decodes a JSON header, appending its ext fields to ext (see
// decodeFrameExt).
func decodeJSONHeader(h []byte, ext []ExtField) (*RemotingCommand, []ExtField, bool, error) {
	if len(bytes.TrimSpace(h)) == 0 {
		return nil, ext, false, &HeaderError{Field: "header", Reason: "empty JSON header"}
	}
	cmd, list, hasExt, ok, tooMany := decodeJSONHeaderFast(h, ext)
	if ok {
		return cmd, list, hasExt, nil
	}
	if tooMany {
		return nil, ext, false, tooManyExtFields()
	}
	if len(h) > maxFallbackHeader {
		return nil, ext, false, &HeaderError{Field: "header", Reason: fmt.Sprintf("a %d-byte JSON header with null, numeric or case-folded fields; such headers are taken up to %d bytes", len(h), maxFallbackHeader)}
	}
	cmd, err := decodeJSONHeaderStd(h)
	if err != nil {
		return nil, ext, false, err
	}
	m := cmd.ExtFields
	if len(m) > MaxExtFields {
		return nil, ext, false, tooManyExtFields()
	}
	cmd.ExtFields = nil
	var kb [32]string
	for _, k := range sortedKeys(kb[:0], m) {
		ext = append(ext, ExtField{Key: k, Value: m[k]})
	}
	return cmd, ext, m != nil, nil
}

// decodeJSONHeaderStd decodes with encoding/json: the reference behaviour, and the path
// for every input the fast parser does not take.
func decodeJSONHeaderStd(h []byte) (*RemotingCommand, error) {
	var jh jsonHeader
	if err := json.Unmarshal(h, &jh); err != nil {
		field := "header"
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			field = ute.Field
		}
		return nil, &HeaderError{Field: field, Reason: "invalid JSON header", Err: err}
	}
	return &RemotingCommand{
		Code:      jh.Code,
		Language:  jh.Language,
		Version:   jh.Version,
		Opaque:    jh.Opaque,
		Flag:      jh.Flag,
		Remark:    jh.Remark,
		ExtFields: jh.ExtFields,
	}, nil
}

// binReader reads big-endian fields from a binary header, remembering the first error.
type binReader struct {
	b   []byte
	err error
}

func (r *binReader) need(n int, field string) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || n > len(r.b) {
		r.err = &HeaderError{Field: field, Reason: fmt.Sprintf("needs %d bytes, %d left in the binary header", n, len(r.b))}
		return false
	}
	return true
}

func (r *binReader) u8(field string) byte {
	if !r.need(1, field) {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *binReader) u16(field string) uint16 {
	if !r.need(2, field) {
		return 0
	}
	v := binary.BigEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *binReader) u32(field string) uint32 {
	if !r.need(4, field) {
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *binReader) bytes(n int, field string) []byte {
	if !r.need(n, field) {
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// decodeBinaryHeader decodes a ROCKETMQ binary header, appending its ext fields to ext
// (see decodeFrameExt). The keys and values that internExt knows (those of send
// requests and responses) are static strings; the others are substrings of one string
// allocated for the header, holding only them.
func decodeBinaryHeader(h []byte, ext0 []ExtField) (*RemotingCommand, []ExtField, bool, error) {
	r := binReader{b: h}
	cmd := &RemotingCommand{}
	cmd.Code = int16(r.u16("code"))
	cmd.Language = LanguageCode(r.u8("language"))
	cmd.Version = int16(r.u16("version"))
	cmd.Opaque = int32(r.u32("opaque"))
	cmd.Flag = int32(r.u32("flag"))
	remarkLen := int32(r.u32("remark"))
	cmd.Remark = string(r.bytes(int(remarkLen), "remark"))
	extLen := int32(r.u32("extFields"))
	ext := r.bytes(int(extLen), "extFields")
	if r.err != nil {
		return nil, ext0, false, r.err
	}
	if len(r.b) != 0 {
		return nil, ext0, false, &HeaderError{Field: "header", Reason: fmt.Sprintf("%d trailing bytes after the extFields block", len(r.b))}
	}
	if len(ext) == 0 {
		return cmd, ext0, false, nil
	}
	// First pass: check the block and append the fields, with their static strings
	// (internExt) and "" for the others, counting the bytes those need.
	list, need := ext0, 0
	for i := 0; i < len(ext); {
		k, v, next, ok := nextExtField(ext, i)
		if !ok {
			return nil, ext0, false, extBlockErr(ext)
		}
		if len(list)-len(ext0) >= MaxExtFields {
			return nil, ext0, false, tooManyExtFields()
		}
		ks, kok := internExt(k)
		vs, vok := internExt(v)
		if !kok {
			need += len(k)
		}
		if !vok {
			need += len(v)
		}
		list = append(list, ExtField{Key: ks, Value: vs})
		i = next
	}
	if need == 0 {
		return cmd, list, true, nil
	}
	// Second pass: the other strings, substrings of one allocation of need bytes (a
	// field's string is "" here only when it is not static, or empty).
	var sb strings.Builder
	sb.Grow(need) // no reallocation below: the substrings taken stay valid
	fields := list[len(ext0):]
	for f, i := 0, 0; i < len(ext); f++ {
		k, v, next, _ := nextExtField(ext, i)
		if fields[f].Key == "" && len(k) > 0 {
			at := sb.Len()
			sb.Write(k)
			fields[f].Key = sb.String()[at:]
		}
		if fields[f].Value == "" && len(v) > 0 {
			at := sb.Len()
			sb.Write(v)
			fields[f].Value = sb.String()[at:]
		}
		i = next
	}
	return cmd, list, true, nil
}

// nextExtField returns the key and value of the ext field at ext[i:] of a binary
// header's extFields block (a 2-byte key length, the key, a 4-byte value length, the
// value) and the offset after it; ok is false when the field does not fit in the block
// (extBlockErr then says why).
func nextExtField(ext []byte, i int) (k, v []byte, next int, ok bool) {
	if len(ext)-i < 2 {
		return nil, nil, i, false
	}
	kl := int(int16(binary.BigEndian.Uint16(ext[i:])))
	i += 2
	if kl < 0 || kl > len(ext)-i-4 {
		return nil, nil, i, false
	}
	k = ext[i : i+kl]
	i += kl
	vl := int(int32(binary.BigEndian.Uint32(ext[i:])))
	i += 4
	if vl < 0 || vl > len(ext)-i {
		return nil, nil, i, false
	}
	return k, ext[i : i+vl], i + vl, true
}

// extBlockErr returns the *HeaderError (Field "extFields") of a binary extFields block
// that nextExtField found malformed, reading it field by field as binReader does.
func extBlockErr(ext []byte) error {
	er := &binReader{b: ext}
	for len(er.b) > 0 && er.err == nil {
		kl := int16(er.u16("extFields"))
		er.bytes(int(kl), "extFields")
		vl := int32(er.u32("extFields"))
		er.bytes(int(vl), "extFields")
	}
	if er.err == nil { // not reached: nextExtField and binReader agree
		return &HeaderError{Field: "extFields", Reason: "malformed extFields block"}
	}
	return er.err
}

// oneByteStrings holds every byte value at its own index: oneByteStrings[c:c+1] is the
// 1-byte string c without an allocation.
var oneByteStrings = func() string {
	var b [256]byte
	for i := range b {
		b[i] = byte(i)
	}
	return string(b[:])
}()

// internExt returns a static string equal to b when b is one of the ext keys and values
// most decoded headers carry, so that decoding them copies nothing: every 0- and 1-byte
// string (the keys of SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE requests, single digits),
// the keys of a send response (Java SendMessageResponseHeader msgId, queueId,
// queueOffset, transactionId; the broker's MSG_REGION and TRACE_ON), and the values
// "true", "false", "-1", "TBW102" and "DefaultRegion" (defaults of those headers).
func internExt(b []byte) (string, bool) {
	switch len(b) {
	case 0:
		return "", true
	case 1:
		return oneByteStrings[b[0] : int(b[0])+1], true
	}
	// By length, then one comparison of known length: no allocation, no search.
	var c string
	switch len(b) {
	case 2:
		c = "-1"
	case 4:
		c = "true"
	case 5:
		if c = "msgId"; string(b) != c {
			c = "false"
		}
	case 6:
		c = "TBW102"
	case 7:
		c = "queueId"
	case 8:
		c = "TRACE_ON"
	case 10:
		c = "MSG_REGION"
	case 11:
		c = "queueOffset"
	case 13:
		if c = "transactionId"; string(b) != c {
			c = "DefaultRegion"
		}
	default:
		return "", false
	}
	if string(b) == c {
		return c, true
	}
	return "", false
}

// ReadFrame reads one frame from r: the 4-byte big-endian length, then that many bytes,
// which it returns (without the length field; pass them to [DecodeFrame]).
// maxFrameSize is the largest frame in bytes counting the length field, as Java's
// frameMaxLength; <= 0 means [DefaultMaxFrameSize]. A clean end of stream before the
// first byte returns io.EOF unwrapped. Errors: [*FrameError] for a length < 4 or
// > maxFrameSize-4 (Field "length"), a header length beyond the frame (Field
// "headerLength"), or a stream that ends inside the frame (Field "length" or "body",
// wrapping io.ErrUnexpectedEOF); other read errors are returned as they are.
//
// The frame belongs to the caller: nothing else holds or reuses it. A frame of 128 KiB
// or less may come in a recycled buffer (one the package's connections wrote or were
// given back by [RemotingCommand.ReleaseBody]): its capacity may go beyond its length,
// over bytes of an earlier frame ([DecodeFrame] caps the Body it returns at the frame's end).
func ReadFrame(r io.Reader, maxFrameSize int) ([]byte, error) {
	if maxFrameSize <= 0 {
		maxFrameSize = DefaultMaxFrameSize
	}
	var lb [4]byte
	if n, err := io.ReadFull(r, lb[:]); err != nil {
		if err == io.EOF || n == 0 {
			return nil, err
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &FrameError{Field: "length", Reason: fmt.Sprintf("stream ended after %d of 4 length bytes", n), Err: err}
		}
		return nil, err
	}
	length := int64(int32(binary.BigEndian.Uint32(lb[:])))
	if length < 4 {
		return nil, &FrameError{Field: "length", Reason: fmt.Sprintf("length %d is below the minimum 4", length)}
	}
	if length > int64(maxFrameSize)-4 {
		return nil, &FrameError{Field: "length", Reason: fmt.Sprintf("frame of %d bytes exceeds the maximum frame size %d", length+4, maxFrameSize)}
	}
	// Allocate with the data actually received (at most twice what arrived), so that a
	// peer announcing a large frame and sending little cannot make us hold the announced
	// size: the first 64 KiB at once, then a buffer twice as large each time it is full.
	// A frame announced at maxPooledFrame (128 KiB) or less gets its whole buffer at once,
	// a recycled one when one is free (RemotingCommand.ReleaseBody gives them back).
	const eagerAlloc = 64 << 10
	var frame []byte
	if length <= maxPooledFrame {
		frame = frameBuf(max(int(length), 8), false)[:length] // frameBuf's buffers hold at least 8 bytes
	} else {
		frame = make([]byte, eagerAlloc)
	}
	_, err := io.ReadFull(r, frame)
	for err == nil && int64(len(frame)) < length {
		grown := make([]byte, min(length, 2*int64(len(frame))))
		copy(grown, frame)
		_, err = io.ReadFull(r, grown[len(frame):])
		frame = grown
	}
	if err != nil {
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &FrameError{Field: "body", Reason: fmt.Sprintf("stream ended inside a frame of length %d", length), Err: io.ErrUnexpectedEOF}
		}
		return nil, err
	}
	if hl := int(binary.BigEndian.Uint32(frame) & maxHeaderLen); hl > len(frame)-4 {
		return nil, &FrameError{Field: "headerLength", Reason: fmt.Sprintf("header length %d exceeds the %d bytes left in the frame", hl, len(frame)-4)}
	}
	return frame, nil
}
