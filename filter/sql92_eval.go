package filter

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/message"
)

// kind is the run-time type of a value during SQL92 evaluation. These mirror the Java
// types RocketMQ's evaluator sees: null, Boolean, Long/Integer (here always int64), Double
// and String (every message property is a String).
type kind uint8

const (
	kNull kind = iota
	kBool
	kInt
	kFloat
	kString
)

// value is one evaluation result. kNull is SQL's NULL / UNKNOWN.
type value struct {
	k kind
	b bool
	i int64
	f float64
	s string
}

var (
	valNull  = value{}
	valTrue  = value{k: kBool, b: true}
	valFalse = value{k: kBool}
)

func boolValue(b bool) value {
	if b {
		return valTrue
	}
	return valFalse
}

// literal renders v as it would be written in an expression.
func (v value) literal() string {
	switch v.k {
	case kBool:
		if v.b {
			return "TRUE"
		}
		return "FALSE"
	case kInt:
		return strconv.FormatInt(v.i, 10)
	case kFloat:
		s := strconv.FormatFloat(v.f, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEIN") {
			s += ".0"
		}
		return s
	case kString:
		return quoteSQL(v.s)
	}
	return "NULL"
}

// SQLEvalError says why evaluating a SQL92 filter for one message failed, e.g. a property
// that is not a number compared with a number. RocketMQ throws in these cases and the
// message does not match; [SQLFilter.Evaluate] returns false, [SQLFilter.EvaluateErr]
// returns this error.
type SQLEvalError struct {
	Pos    int    // byte offset in the expression of the operation that failed
	Reason string // what went wrong
}

// Error returns "sql92 evaluation error at byte <pos>: <reason>".
func (e *SQLEvalError) Error() string {
	return fmt.Sprintf("sql92 evaluation error at byte %d: %s", e.Pos, e.Reason)
}

// propSource looks up message properties either in a map or, without building one, in
// a raw RocketMQ properties string (name 0x01 value 0x02 ...).
type propSource struct {
	m   map[string]string
	raw string
	isR bool
}

// get returns the property's value; ok is false when it is missing. Like
// [message.UnmarshalProperties] (and Java's decoder), pieces with an empty name or value
// are ignored and a later duplicate wins, so an empty property counts as missing.
func (s *propSource) get(name string) (string, bool) {
	if !s.isR {
		v, ok := s.m[name]
		return v, ok
	}
	var (
		found string
		ok    bool
	)
	rest := s.raw
	for len(rest) > 0 {
		var piece string
		if i := strings.IndexByte(rest, message.PropertySeparator); i >= 0 {
			piece, rest = rest[:i], rest[i+1:]
		} else {
			piece, rest = rest, ""
		}
		if len(piece) <= len(name)+1 || piece[len(name)] != message.NameValueSeparator || piece[:len(name)] != name {
			continue
		}
		found, ok = piece[len(name)+1:], true
	}
	return found, ok
}

func evalErr(n *node, format string, args ...any) error {
	return &SQLEvalError{Pos: n.pos, Reason: fmt.Sprintf(format, args...)}
}

// eval computes n. The rules follow RocketMQ 4.9's expression classes
// (ComparisonExpression, LogicExpression, UnaryExpression), with the deviations listed in
// the package's SQL92 documentation (see [CompileSQL92]).
func (n *node) eval(src *propSource) (value, error) {
	switch n.op {
	case opConst:
		return n.val, nil
	case opProp:
		if v, ok := src.get(n.name); ok {
			return value{k: kString, s: v}, nil
		}
		return valNull, nil
	case opBoolCast:
		// A property used as a condition: RocketMQ's createBooleanCast yields NULL for a
		// missing property and FALSE for any String.
		v, err := n.kids[0].eval(src)
		if err != nil || v.k == kNull || v.k == kBool {
			return v, err
		}
		return valFalse, nil
	case opNeg:
		v, err := n.kids[0].eval(src)
		if err != nil {
			return v, err
		}
		switch v.k {
		case kInt:
			return value{k: kInt, i: -v.i}, nil
		case kFloat:
			return value{k: kFloat, f: -v.f}, nil
		}
		return valNull, nil
	case opNot:
		v, err := n.kids[0].eval(src)
		if err != nil || v.k != kBool {
			return v, err // NULL stays NULL
		}
		return boolValue(!v.b), nil
	case opAnd:
		unknown := false
		for _, k := range n.kids {
			v, err := k.eval(src)
			if err != nil {
				return v, err
			}
			if v.k == kBool && !v.b {
				return valFalse, nil
			}
			unknown = unknown || v.k != kBool
		}
		if unknown {
			return valNull, nil
		}
		return valTrue, nil
	case opOr:
		unknown := false
		for _, k := range n.kids {
			v, err := k.eval(src)
			if err != nil {
				return v, err
			}
			if v.k == kBool && v.b {
				return valTrue, nil
			}
			unknown = unknown || v.k != kBool
		}
		if unknown {
			return valNull, nil
		}
		return valFalse, nil
	case opEq, opNe:
		l, err := n.kids[0].eval(src)
		if err != nil {
			return l, err
		}
		r, err := n.kids[1].eval(src)
		if err != nil {
			return r, err
		}
		if l.k == kNull || r.k == kNull {
			return valNull, nil
		}
		eq, err := equalValues(l, r)
		if err != nil {
			return valNull, evalErr(n, "%v", err)
		}
		return boolValue(eq == (n.op == opEq)), nil
	case opGt, opGe, opLt, opLe:
		l, err := n.kids[0].eval(src)
		if err != nil || l.k == kNull {
			return l, err
		}
		r, err := n.kids[1].eval(src)
		if err != nil || r.k == kNull {
			return r, err
		}
		c, err := orderValues(l, r)
		if err != nil {
			return valNull, evalErr(n, "%v", err)
		}
		return boolValue(ordered(n.op, c)), nil
	case opBetween, opNotBetween:
		return n.evalBetween(src)
	case opIn, opNotIn:
		v, err := n.kids[0].eval(src)
		if err != nil || v.k != kString {
			return valNull, err // a missing property makes IN and NOT IN unknown
		}
		var in bool
		if n.set != nil {
			_, in = n.set[v.s]
		} else {
			for _, s := range n.list {
				if s == v.s {
					in = true
					break
				}
			}
		}
		return boolValue(in == (n.op == opIn)), nil
	case opIsNull, opIsNotNull:
		v, err := n.kids[0].eval(src)
		if err != nil {
			return v, err
		}
		return boolValue((v.k == kNull) == (n.op == opIsNull)), nil
	}
	return valNull, evalErr(n, "unknown operation %d", n.op)
}

func ordered(op opcode, c int) bool {
	switch op {
	case opGt:
		return c > 0
	case opGe:
		return c >= 0
	case opLt:
		return c < 0
	}
	return c <= 0
}

// evalBetween computes x BETWEEN lo AND hi as RocketMQ does: (x >= lo) AND (x <= hi), and
// x NOT BETWEEN lo AND hi as (x < lo) OR (x > hi), x being evaluated once.
func (n *node) evalBetween(src *propSource) (value, error) {
	x, err := n.kids[0].eval(src)
	if err != nil || x.k == kNull {
		return valNull, err
	}
	unknown := false
	for i, bound := range n.kids[1:] {
		b, err := bound.eval(src)
		if err != nil {
			return b, err
		}
		if b.k == kNull {
			unknown = true
			continue
		}
		c, err := orderValues(x, b)
		if err != nil {
			return valNull, evalErr(n, "%v", err)
		}
		var holds bool // this half of the condition
		if n.op == opBetween {
			holds = i == 0 && c >= 0 || i == 1 && c <= 0
			if !holds {
				return valFalse, nil
			}
		} else {
			holds = i == 0 && c < 0 || i == 1 && c > 0
			if holds {
				return valTrue, nil
			}
		}
	}
	if unknown {
		return valNull, nil
	}
	return boolValue(n.op == opBetween), nil
}

// equalValues implements = for two non-NULL values: same types compare directly; a
// number and a string convert the string to the number's type (Java Long.parseLong /
// Double.valueOf, failing → error); a boolean and a string convert the string like Java's
// Boolean.valueOf (case-insensitive "true", anything else false); a boolean and a number
// are never equal; two numbers compare as doubles when either is one.
func equalValues(l, r value) (bool, error) {
	if l.k == kBool || r.k == kBool {
		switch {
		case l.k == kBool && r.k == kBool:
			return l.b == r.b, nil
		case l.k == kString:
			return javaParseBoolean(l.s) == r.b, nil
		case r.k == kString:
			return l.b == javaParseBoolean(r.s), nil
		}
		return false, nil
	}
	if l.k == kString && r.k == kString {
		return l.s == r.s, nil
	}
	c, err := compareValues(l, r)
	return c == 0, err
}

// orderValues implements > >= < <= for two non-NULL values: two strings are both
// converted to doubles (RocketMQ refuses to order strings that are not numbers); otherwise
// as compareValues.
func orderValues(l, r value) (int, error) {
	if l.k == kString && r.k == kString {
		lf, err := javaParseDouble(l.s)
		if err != nil {
			return 0, fmt.Errorf("cannot order strings %s and %s: %w", quoteSQL(l.s), quoteSQL(r.s), err)
		}
		rf, err := javaParseDouble(r.s)
		if err != nil {
			return 0, fmt.Errorf("cannot order strings %s and %s: %w", quoteSQL(l.s), quoteSQL(r.s), err)
		}
		return javaCompareDouble(lf, rf), nil
	}
	return compareValues(l, r)
}

// compareValues orders two non-NULL values after RocketMQ's type promotion (its
// __compare): int with float → float; a string with a number → the number's type; booleans
// order false < true, a string with a boolean converts the string; other mixes (a boolean
// with a number, which the compiler mostly prevents) compare as "less".
func compareValues(l, r value) (int, error) {
	if l.k == r.k {
		switch l.k {
		case kInt:
			return cmpInt(l.i, r.i), nil
		case kFloat:
			return javaCompareDouble(l.f, r.f), nil
		case kString:
			return strings.Compare(l.s, r.s), nil
		case kBool:
			return cmpBool(l.b, r.b), nil
		}
		return 0, nil
	}
	switch {
	case l.k == kString:
		conv, err := convertString(l.s, r.k)
		if err != nil {
			return 0, err
		}
		return compareValues(conv, r)
	case r.k == kString:
		conv, err := convertString(r.s, l.k)
		if err != nil {
			return 0, err
		}
		return compareValues(l, conv)
	case l.k == kInt && r.k == kFloat:
		return javaCompareDouble(float64(l.i), r.f), nil
	case l.k == kFloat && r.k == kInt:
		return javaCompareDouble(l.f, float64(r.i)), nil
	}
	return -1, nil
}

// convertString converts a property string to kind k for a comparison with a value of
// that kind.
func convertString(s string, k kind) (value, error) {
	switch k {
	case kInt:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return valNull, fmt.Errorf("%s is not an integer (Java long)", quoteSQL(s))
		}
		return value{k: kInt, i: i}, nil
	case kFloat:
		f, err := javaParseDouble(s)
		if err != nil {
			return valNull, err
		}
		return value{k: kFloat, f: f}, nil
	case kBool:
		return boolValue(javaParseBoolean(s)), nil
	}
	return value{k: kString, s: s}, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// javaCompareDouble orders like Java's Double.compareTo: -0.0 < 0.0, and NaN equals
// itself and is greater than every other value, +Inf included.
func javaCompareDouble(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn:
		return 0
	case an:
		return 1
	case bn:
		return -1
	}
	sa, sb := math.Signbit(a), math.Signbit(b) // a == b here; only ±0 can differ
	switch {
	case sa == sb:
		return 0
	case sa:
		return -1
	}
	return 1
}

// javaParseBoolean is Java's Boolean.parseBoolean: true only for "true", any case.
func javaParseBoolean(s string) bool { return strings.EqualFold(s, "true") }

// javaParseDouble parses s as Java's Double.valueOf does: surrounding characters <= ' '
// are trimmed; then an optional sign and "NaN", "Infinity", a decimal number (digits with
// an optional '.', at least one digit, an optional exponent) or a hexadecimal one
// ("0x1.8p1", exponent required), each number optionally followed by f, F, d or D.
// Values too large become ±Inf, as in Java.
func javaParseDouble(s string) (float64, error) {
	t := strings.TrimFunc(s, func(r rune) bool { return r <= ' ' })
	body := t
	if body != "" && (body[0] == '+' || body[0] == '-') {
		body = body[1:]
	}
	switch body {
	case "NaN":
		return math.NaN(), nil
	case "Infinity":
		if t[0] == '-' {
			return math.Inf(-1), nil
		}
		return math.Inf(1), nil
	}
	// A type suffix; in a hexadecimal number f and d are digits unless the exponent came.
	if n := len(t); n > 0 && strings.IndexByte("fFdD", t[n-1]) >= 0 && (!isHexPrefixed(body) || strings.ContainsAny(body, "pP")) {
		t, body = t[:n-1], body[:len(body)-1]
	}
	if !javaNumberShape(body) {
		return 0, fmt.Errorf("%s is not a number (Java double)", quoteSQL(s))
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil && !isRangeErr(err) {
		return 0, fmt.Errorf("%s is not a number (Java double)", quoteSQL(s))
	}
	return f, nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func isHexPrefixed(s string) bool {
	return len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')
}

// javaNumberShape checks an unsigned number body (no sign, no type suffix) against Java's
// floating-point literal syntax, so that Go-only forms ("inf", "1_0", "0x1") are refused.
func javaNumberShape(s string) bool {
	isHexDigit := func(c byte) bool {
		return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
	}
	digits := isDigit
	exp := "eE"
	if isHexPrefixed(s) {
		s = s[2:]
		digits = isHexDigit
		exp = "pP"
	}
	i, n := 0, 0
	for i < len(s) && digits(s[i]) {
		i, n = i+1, n+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && digits(s[i]) {
			i, n = i+1, n+1
		}
	}
	if n == 0 {
		return false
	}
	if i < len(s) && strings.IndexByte(exp, s[i]) >= 0 {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == j {
			return false
		}
	} else if exp == "pP" {
		return false // Java requires the binary exponent of a hexadecimal number
	}
	return i == len(s)
}
