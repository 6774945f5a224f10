package filter

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// tokenKind is the kind of one SQL92 filter token. The token set is the one of Apache
// RocketMQ 4.9's JavaCC grammar (filter/.../parser/SelectorParser.jj).
type tokenKind uint8

const (
	tEOF tokenKind = iota
	tIdent
	tInt
	tFloat
	tString
	tLParen
	tRParen
	tComma
	tEq
	tNe
	tGt
	tGe
	tLt
	tLe
	tPlus
	tMinus
	// Reserved words, matched case-insensitively.
	tNot
	tAnd
	tOr
	tBetween
	tIn
	tTrue
	tFalse
	tNull
	tIs
)

var tokenNames = [...]string{
	tEOF: "end of expression", tIdent: "property name", tInt: "integer literal",
	tFloat: "decimal literal", tString: "string literal", tLParen: "'('", tRParen: "')'",
	tComma: "','", tEq: "'='", tNe: "'<>'", tGt: "'>'", tGe: "'>='", tLt: "'<'", tLe: "'<='",
	tPlus: "'+'", tMinus: "'-'", tNot: "NOT", tAnd: "AND", tOr: "OR", tBetween: "BETWEEN",
	tIn: "IN", tTrue: "TRUE", tFalse: "FALSE", tNull: "NULL", tIs: "IS",
}

func (k tokenKind) String() string {
	if int(k) < len(tokenNames) {
		return tokenNames[k]
	}
	return fmt.Sprintf("token(%d)", k)
}

// keywords are RocketMQ 4.x's reserved words. (RocketMQ 5 added CONTAINS, STARTSWITH and
// ENDSWITH; in 4.x those are ordinary property names.)
var keywords = map[string]tokenKind{
	"NOT": tNot, "AND": tAnd, "OR": tOr, "BETWEEN": tBetween, "IN": tIn,
	"TRUE": tTrue, "FALSE": tFalse, "NULL": tNull, "IS": tIs,
}

// token is one lexed token. text is the source slice, except for string literals, where
// it is the decoded value (each doubled quote turned into one).
type token struct {
	kind tokenKind
	pos  int // byte offset in the expression
	text string
}

func (t token) describe() string {
	switch t.kind {
	case tIdent:
		return fmt.Sprintf("property name %q", t.text)
	case tInt, tFloat:
		return fmt.Sprintf("%s %s", t.kind, t.text)
	case tString:
		return fmt.Sprintf("string literal %s", quoteSQL(t.text))
	}
	return t.kind.String()
}

// quoteSQL renders s as a SQL string literal, doubling single quotes.
func quoteSQL(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$'
}

func isIdentPart(c byte) bool { return isIdentStart(c) || isDigit(c) }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// lex splits expr into tokens, ending with a tEOF token. Whitespace is space, tab, CR, LF
// and form feed; "-- ..." runs to the end of the line (or of the expression) and
// "/* ... */" are comments, as in RocketMQ's grammar. Every error is a *SQLSyntaxError.
func lex(expr string) ([]token, error) {
	toks := make([]token, 0, len(expr)/3+1)
	i := 0
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(expr) && expr[i+1] == '-':
			j := strings.IndexAny(expr[i:], "\r\n")
			if j < 0 {
				i = len(expr)
			} else {
				i += j + 1
			}
		case c == '/' && i+1 < len(expr) && expr[i+1] == '*':
			j := strings.Index(expr[i+2:], "*/")
			if j < 0 {
				return nil, syntaxErr(i, "unterminated comment: /* without */")
			}
			i += 2 + j + 2
		case c == '\'':
			s, n, err := lexString(expr, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{kind: tString, pos: i, text: s})
			i += n
		case isDigit(c) || c == '.' && i+1 < len(expr) && isDigit(expr[i+1]):
			t, err := lexNumber(expr, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			i += len(t.text)
		case isIdentStart(c):
			j := i + 1
			for j < len(expr) && isIdentPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			kind := tIdent
			if len(word) <= len("BETWEEN") {
				if k, ok := keywords[strings.ToUpper(word)]; ok {
					kind = k
				}
			}
			toks = append(toks, token{kind: kind, pos: i, text: word})
			i = j
		default:
			kind, n := lexOperator(expr[i:])
			if n == 0 {
				return nil, unexpectedChar(expr, i)
			}
			toks = append(toks, token{kind: kind, pos: i, text: expr[i : i+n]})
			i += n
		}
	}
	return append(toks, token{kind: tEOF, pos: len(expr)}), nil
}

// lexOperator matches a punctuation token at the start of s; n is 0 when none matches.
func lexOperator(s string) (tokenKind, int) {
	if len(s) >= 2 {
		switch s[:2] {
		case "<>":
			return tNe, 2
		case ">=":
			return tGe, 2
		case "<=":
			return tLe, 2
		}
	}
	switch s[0] {
	case '=':
		return tEq, 1
	case '>':
		return tGt, 1
	case '<':
		return tLt, 1
	case '(':
		return tLParen, 1
	case ')':
		return tRParen, 1
	case ',':
		return tComma, 1
	case '+':
		return tPlus, 1
	case '-':
		return tMinus, 1
	}
	return tEOF, 0
}

func unexpectedChar(expr string, i int) error {
	switch {
	case strings.HasPrefix(expr[i:], "!="):
		return syntaxErr(i, "unknown operator '!=' (use '<>')")
	case strings.HasPrefix(expr[i:], "&&"), strings.HasPrefix(expr[i:], "||"):
		return syntaxErr(i, fmt.Sprintf("unknown operator '%s' (use AND / OR)", expr[i:i+2]))
	case expr[i] == '.':
		return syntaxErr(i, "unexpected '.': property names hold only letters, digits, '_' and '$'")
	case expr[i] == '"':
		return syntaxErr(i, "unexpected '\"': string literals use single quotes")
	case expr[i] < utf8.RuneSelf:
		return syntaxErr(i, fmt.Sprintf("unexpected character %q", expr[i]))
	}
	r, _ := utf8.DecodeRuneInString(expr[i:])
	return syntaxErr(i, fmt.Sprintf("unexpected character %U", r))
}

// lexString decodes the string literal starting at expr[start], a single quote. Inside, a doubled quote
// stands for one quote; any other byte, newlines included, is taken as is. It returns
// the decoded value and the literal's length in bytes.
func lexString(expr string, start int) (string, int, error) {
	var b strings.Builder
	i := start + 1
	for {
		j := strings.IndexByte(expr[i:], '\'')
		if j < 0 {
			return "", 0, syntaxErr(start, "unterminated string literal")
		}
		if i+j+1 < len(expr) && expr[i+j+1] == '\'' {
			b.WriteString(expr[i : i+j+1])
			i += j + 2
			continue
		}
		if b.Len() == 0 {
			return expr[i : i+j], i + j + 1 - start, nil
		}
		b.WriteString(expr[i : i+j])
		return b.String(), i + j + 1 - start, nil
	}
}

// lexNumber scans a numeric literal as RocketMQ's grammar defines them:
//
//	integer: 0 | [1-9][0-9]* with an optional l/L suffix (a Java long)
//	decimal: digits '.' digits? exponent? | '.' digits exponent? | digits exponent
//	exponent: [eE] [+-]? digits
//
// A literal directly followed by a letter, digit, '_', '$' or '.' is refused here rather
// than split into two tokens, so "12abc", "1.5L", "007" and "1.2.3" get a clear message.
func lexNumber(expr string, start int) (token, error) {
	i := start
	for i < len(expr) && isDigit(expr[i]) {
		i++
	}
	intDigits := i - start
	isFloat := false
	if i < len(expr) && expr[i] == '.' {
		isFloat = true
		i++
		for i < len(expr) && isDigit(expr[i]) {
			i++
		}
	}
	if i < len(expr) && (expr[i] == 'e' || expr[i] == 'E') {
		j := i + 1
		if j < len(expr) && (expr[j] == '+' || expr[j] == '-') {
			j++
		}
		if j < len(expr) && isDigit(expr[j]) {
			for j < len(expr) && isDigit(expr[j]) {
				j++
			}
			isFloat = true
			i = j
		}
	}
	kind := tFloat
	if !isFloat {
		kind = tInt
		if intDigits > 1 && expr[start] == '0' {
			return token{}, syntaxErr(start, fmt.Sprintf("integer literal %s has a leading zero", expr[start:i]))
		}
		if i < len(expr) && (expr[i] == 'l' || expr[i] == 'L') {
			i++
		}
	}
	if i < len(expr) && (isIdentPart(expr[i]) || expr[i] == '.') {
		j := i
		for j < len(expr) && (isIdentPart(expr[j]) || expr[j] == '.') {
			j++
		}
		return token{}, syntaxErr(start, fmt.Sprintf("malformed number %q", expr[start:j]))
	}
	return token{kind: kind, pos: start, text: expr[start:i]}, nil
}
