package remoting

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// A reflection-free parser for the JSON header shapes that Java and the Go client
// actually send. It handles only what it can decode exactly like encoding/json would;
// on anything else (errors included) it reports ok=false and decodeJSONHeader falls
// back to encoding/json, which then decides and reports errors. FuzzJSONFastPath checks
// that both agree whenever the fast path accepts an input.

type fastJSON struct {
	b []byte
	s string // b as one string: unescaped strings are substrings of it (one allocation per header)
	i int
	// ext receives the ext fields in wire order; hasExt is set when the header has an
	// extFields object (null or absent leaves it false).
	ext    []ExtField
	hasExt bool
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
	// Fast scan: no escapes, ASCII or valid UTF-8.
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", false
			}
			return p.s[start : p.i-1], true
		case c == '\\':
			return p.strEscaped(start)
		case c < 0x20:
			return "", false
		default:
			p.i++
		}
	}
	return "", false
}

func (p *fastJSON) strEscaped(start int) (string, bool) {
	out := make([]byte, 0, p.i-start+16)
	out = append(out, p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			p.i++
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

// decodeJSONHeaderFast decodes header h with its ext fields appended to ext (see
// decodeFrameExt). It returns ok=false whenever it is not certain to match encoding/json.
func decodeJSONHeaderFast(h []byte, ext []ExtField) (cmd *RemotingCommand, _ []ExtField, hasExt, ok bool) {
	p := &fastJSON{b: h, s: string(h), ext: ext}
	if cmd, ok = p.header(); !ok {
		return nil, ext, false, false
	}
	return cmd, p.ext, p.hasExt, true
}

func (p *fastJSON) header() (*RemotingCommand, bool) {
	cmd := &RemotingCommand{}
	var seen uint8
	p.ws()
	if p.peek() != '{' {
		return nil, false
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
				return nil, false
			}
			p.ws()
			if p.peek() != ':' {
				return nil, false
			}
			p.i++
			p.ws()
			idx := -1
			for k, known := range knownHeaderKeys {
				if key == known {
					idx = k
					break
				}
				if strings.EqualFold(key, known) {
					return nil, false // encoding/json matches keys case-insensitively
				}
			}
			if idx >= 0 {
				if seen&(1<<idx) != 0 {
					return nil, false // duplicate key
				}
				seen |= 1 << idx
			}
			if !p.value(idx, key, cmd) {
				return nil, false
			}
			p.ws()
			switch p.peek() {
			case ',':
				p.i++
				continue
			case '}':
				p.i++
			default:
				return nil, false
			}
			break
		}
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, false
	}
	return cmd, true
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
	case 6: // extFields
		if p.lit("null") {
			return true
		}
		return p.extFields()
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

func (p *fastJSON) extFields() bool {
	if p.peek() != '{' {
		return false
	}
	p.i++
	p.hasExt = true
	p.ws()
	if p.peek() == '}' {
		p.i++
		return true
	}
	for {
		p.ws()
		k, ok := p.str()
		if !ok {
			return false
		}
		p.ws()
		if p.peek() != ':' {
			return false
		}
		p.i++
		p.ws()
		v, ok := p.str() // a non-string value (null, number) goes to encoding/json
		if !ok {
			return false
		}
		p.ext = append(p.ext, ExtField{Key: k, Value: v})
		p.ws()
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}
