package remoting

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// A reflection-free parser for the JSON header shapes that Java and the Go client
// actually send. It handles only what it can decode exactly like encoding/json would;
// on anything else (errors included) it reports ok=false and decodeJSONHeader falls
// back to encoding/json, which then decides and reports errors. FuzzJSONFastPath checks
// that both agree whenever the fast path accepts an input.

type fastJSON struct {
	b       []byte
	s       string // b as one string: unescaped strings are substrings of it (one allocation per header)
	i       int
	extBase int  // len(ext) before this header's fields
	tooMany bool // gave up at MaxExtFields ext fields: refuse, do not fall back
}

func (p *fastJSON) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastJSON) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *fastJSON) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s { // no allocation
		p.i += len(s)
		return true
	}
	return false
}

// integer parses -?(0|[1-9][0-9]*) within [lo, hi]; ok=false for anything else
// (fractions, exponents, overflow).
func (p *fastJSON) integer(lo, hi int64) (int64, bool) {
	neg := false
	if p.peek() == '-' {
		neg = true
		p.i++
	}
	start := p.i
	var n int64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		if p.i-start >= 18 {
			return 0, false
		}
		n = n*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 || (digits > 1 && p.b[start] == '0') {
		return 0, false
	}
	if c := p.peek(); c == '.' || c == 'e' || c == 'E' {
		return 0, false
	}
	if neg {
		n = -n
	}
	if n < lo || n > hi {
		return 0, false
	}
	return n, true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// str parses a JSON string. It gives up (ok=false) on invalid UTF-8, lone surrogates,
// control characters and bad escapes, whose exact treatment is left to encoding/json.
func (p *fastJSON) str() (string, bool) {
	if p.peek() != '"' {
		return "", false
	}
	p.i++
	start := p.i
	// Fast scan: no escapes, ASCII or valid UTF-8 (checked only when a byte is >= 0x80).
	high := false
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if high && !utf8.Valid(s) {
				return "", false
			}
			return p.s[start : p.i-1], true
		case c == '\\':
			return p.strEscaped(start)
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			high = true
		}
		p.i++
	}
	return "", false
}

func (p *fastJSON) strEscaped(start int) (string, bool) {
	// The unescaped string is no longer than the raw one up to the closing quote.
	end := p.i
	for end < len(p.b) && p.b[end] != '"' {
		if p.b[end] == '\\' {
			end++
		}
		end++
	}
	out := make([]byte, 0, min(end, len(p.b))-start)
	out = append(out, p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(out) {
				return "", false
			}
			if len(out) == 0 {
				return "", true
			}
			// out is never written again: the string may share its bytes.
			return unsafe.String(&out[0], len(out)), true
		case c < 0x20:
			return "", false
		case c != '\\':
			// Copy the run of plain bytes up to the next quote, backslash or control byte.
			j := p.i + 1
			for j < len(p.b) && p.b[j] != '"' && p.b[j] != '\\' && p.b[j] >= 0x20 {
				j++
			}
			out = append(out, p.b[p.i:j]...)
			p.i = j
			continue
		}
		if p.i+1 >= len(p.b) {
			return "", false
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(p.b[p.i:])
			if !ok {
				return "", false
			}
			p.i += 4
			if utf16.IsSurrogate(r) {
				if p.i+6 > len(p.b) || p.b[p.i] != '\\' || p.b[p.i+1] != 'u' {
					return "", false
				}
				r2, ok := hex4(p.b[p.i+2:])
				if !ok {
					return "", false
				}
				dec := utf16.DecodeRune(r, r2)
				if dec == utf8.RuneError {
					return "", false
				}
				p.i += 6
				r = dec
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
	}
	return "", false
}

var knownHeaderKeys = [...]string{"code", "language", "version", "opaque", "flag", "remark", "extFields"}

// knownHeaderKey returns the index in knownHeaderKeys of key spelled exactly, or -1.
func knownHeaderKey(key string) int {
	switch key {
	case "code":
		return 0
	case "language":
		return 1
	case "version":
		return 2
	case "opaque":
		return 3
	case "flag":
		return 4
	case "remark":
		return 5
	case "extFields":
		return 6
	}
	return -1
}

// decodeJSONHeaderFast decodes header h with its ext fields appended to ext (see
// decodeFrameExt). It returns ok=false whenever it is not certain to match encoding/json.
func decodeJSONHeaderFast(h []byte, ext []ExtField) (cmd *RemotingCommand, _ []ExtField, hasExt, ok, tooMany bool) {
	p := &fastJSON{b: h, s: string(h), extBase: len(ext)}
	list := ext
	if cmd, list, hasExt, ok = p.header(list); !ok {
		return nil, ext, false, false, p.tooMany
	}
	return cmd, list, hasExt, true, false
}

// header parses the header object, appending the ext fields to ext (passed and
// returned rather than kept in p, so that a caller's stack buffer stays on the stack).
func (p *fastJSON) header(ext []ExtField) (_ *RemotingCommand, _ []ExtField, hasExt, ok bool) {
	cmd := &RemotingCommand{}
	var seen uint8
	p.ws()
	if p.peek() != '{' {
		return nil, ext, false, false
	}
	p.i++
	p.ws()
	if p.peek() == '}' {
		p.i++
	} else {
		for {
			p.ws()
			key, ok := p.str()
			if !ok {
				return nil, ext, false, false
			}
			p.ws()
			if p.peek() != ':' {
				return nil, ext, false, false
			}
			p.i++
			p.ws()
			idx := knownHeaderKey(key)
			if idx < 0 {
				for _, known := range knownHeaderKeys {
					if strings.EqualFold(key, known) {
						return nil, ext, false, false // encoding/json matches keys case-insensitively
					}
				}
			}
			if idx >= 0 {
				if seen&(1<<idx) != 0 {
					return nil, ext, false, false // duplicate key
				}
				seen |= 1 << idx
			}
			if idx == 6 { // extFields
				if !p.lit("null") {
					if ext, ok = p.extFields(ext); !ok {
						return nil, ext, false, false
					}
					hasExt = true
				}
			} else if !p.value(idx, key, cmd) {
				return nil, ext, false, false
			}
			p.ws()
			switch p.peek() {
			case ',':
				p.i++
				continue
			case '}':
				p.i++
			default:
				return nil, ext, false, false
			}
			break
		}
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, ext, false, false
	}
	return cmd, ext, hasExt, true
}

// value parses the value of header key number idx (-1: unknown key) into cmd.
func (p *fastJSON) value(idx int, key string, cmd *RemotingCommand) bool {
	switch idx {
	case 0, 2: // code, version: int16
		if p.lit("null") {
			return true
		}
		n, ok := p.integer(-1<<15, 1<<15-1)
		if idx == 0 {
			cmd.Code = int16(n)
		} else {
			cmd.Version = int16(n)
		}
		return ok
	case 3, 4: // opaque, flag: int32
		if p.lit("null") {
			return true
		}
		n, ok := p.integer(-1<<31, 1<<31-1)
		if idx == 3 {
			cmd.Opaque = int32(n)
		} else {
			cmd.Flag = int32(n)
		}
		return ok
	case 1: // language: a name string or an ordinal
		switch c := p.peek(); {
		case c == '"':
			s, ok := p.str()
			cmd.Language = ParseLanguageCode(s)
			return ok
		case c == '-' || (c >= '0' && c <= '9'):
			n, ok := p.integer(0, 255)
			cmd.Language = LanguageCode(n)
			return ok
		}
		return false
	case 5: // remark
		if p.lit("null") {
			return true
		}
		s, ok := p.str()
		cmd.Remark = s
		return ok
	}
	// Unknown key (e.g. Java's serializeTypeCurrentRPC): skip a simple value.
	for _, r := range key {
		if r >= utf8.RuneSelf {
			return false // leave Unicode case folding to encoding/json
		}
	}
	switch c := p.peek(); {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		_, ok := p.integer(-1<<62, 1<<62)
		return ok
	}
	return p.lit("true") || p.lit("false") || p.lit("null")
}

// extFields parses the extFields object, appending its fields to ext.
func (p *fastJSON) extFields(ext []ExtField) ([]ExtField, bool) {
	if p.peek() != '{' {
		return ext, false
	}
	p.i++
	p.ws()
	if p.peek() == '}' {
		p.i++
		return ext, true
	}
	for {
		p.ws()
		k, ok := p.str()
		if !ok {
			return ext, false
		}
		p.ws()
		if p.peek() != ':' {
			return ext, false
		}
		p.i++
		p.ws()
		v, ok := p.str() // a non-string value (null, number) goes to encoding/json
		if !ok {
			return ext, false
		}
		if len(ext)-p.extBase >= MaxExtFields {
			p.tooMany = true
			return ext, false
		}
		ext = append(ext, ExtField{Key: k, Value: v})
		p.ws()
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return ext, true
		default:
			return ext, false
		}
	}
}
