package filter

import (
	"fmt"
)

// Limits on SQL92 filter expressions. They bound the work a consumer's subscription can
// cause at compile time and per message; Apache RocketMQ has no such limits.
const (
	// MaxSQLLength is the longest expression CompileSQL92 accepts, in bytes.
	MaxSQLLength = 16 << 10
	// MaxSQLDepth is the deepest nesting accepted: parentheses and unary operators (NOT, -,
	// +) count against it, and so does the height of the expression tree, to which each
	// operator adds one level (a flattened AND/OR chain of any length adds one).
	MaxSQLDepth = 100
	// MaxSQLInList is the largest number of values in one IN or NOT IN list.
	MaxSQLInList = 1024
)

// SQLSyntaxError is a refused SQL92 filter expression: a lexical or grammar error, a limit
// exceeded, or an operation RocketMQ refuses when it compiles the expression (e.g. '>' on a
// string literal, "= NULL", BETWEEN with its lower bound above its upper bound).
type SQLSyntaxError struct {
	Pos    int    // byte offset in the expression where the problem was found
	Reason string // what is wrong, naming the token or limit
}

// Error returns "sql92 syntax error at byte <pos>: <reason>".
func (e *SQLSyntaxError) Error() string {
	return fmt.Sprintf("sql92 syntax error at byte %d: %s", e.Pos, e.Reason)
}

func syntaxErr(pos int, reason string) error { return &SQLSyntaxError{Pos: pos, Reason: reason} }

// SQLFilter is a compiled SQL92 property filter (RocketMQ expression type "SQL92"). It is
// immutable and safe for concurrent use. It satisfies the store's filter interface
// (MatchTagsCode, MatchRecord).
type SQLFilter struct {
	expr string
	root *node
}

// CompileSQL92 parses a RocketMQ SQL92 filter expression. Errors are *[SQLSyntaxError]
// with the byte offset and the reason.
//
// The language is Apache RocketMQ 4.9's (filter module, SelectorParser.jj):
//   - literals: integers (0 or [1-9][0-9]*, optional L suffix, Java long range), decimals
//     (1.5, 1., .5, 1e3, 1.5E-3), 'strings' (a doubled quote inside is one quote), TRUE, FALSE, NULL;
//   - property names: [A-Za-z_$][A-Za-z0-9_$]*, case-sensitive (no '.', as in RocketMQ 4);
//     the tag is the property TAGS;
//   - operators: = <> > >= < <=, [NOT] BETWEEN x AND y, [NOT] IN ('a', ...) (strings only,
//     at least one), IS [NOT] NULL, AND, OR, NOT, unary + and -, parentheses;
//   - keywords are case-insensitive; -- line and /* block */ comments are skipped.
//
// Precedence, lowest first: OR; AND; = <> IS; > >= < <= BETWEEN IN; unary NOT - +. NOT
// binds tighter than comparisons, as in RocketMQ: "NOT a = '1'" is "(NOT a) = '1'", which
// never matches; write "NOT (a = '1')".
//
// Compile-time refusals taken from RocketMQ: the whole expression, and operands of AND,
// OR and NOT, must be conditions (a bare property is allowed: it is NULL when missing and
// FALSE otherwise); > >= < <= and BETWEEN refuse string, boolean and NULL literals and
// conditions; = and <> refuse NULL and a boolean literal against a non-boolean literal;
// BETWEEN with constant bounds refuses NULL and lo > hi; IN needs a property on its left.
//
// Evaluation ([SQLFilter.Evaluate]) follows RocketMQ's rules; see its documentation.
func CompileSQL92(expr string) (*SQLFilter, error) {
	if len(expr) > MaxSQLLength {
		return nil, syntaxErr(MaxSQLLength, fmt.Sprintf("expression is %d bytes, longer than the limit of %d", len(expr), MaxSQLLength))
	}
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p := parser{toks: toks}
	root, err := p.parse()
	if err != nil {
		return nil, err
	}
	return &SQLFilter{expr: expr, root: root}, nil
}

// Expression returns the source text the filter was compiled from.
func (f *SQLFilter) Expression() string { return f.expr }

// String returns the parsed expression fully parenthesised (e.g. "((a = 1) AND (b IS
// NULL))"), which shows precedence and the folding of negative numbers.
func (f *SQLFilter) String() string { return f.root.String() }

// Evaluate reports whether a message with these properties matches. Property names are
// case-sensitive; nil props means no properties. The result is TRUE → match; FALSE,
// UNKNOWN (NULL) or an evaluation error → no match.
//
// Semantics (RocketMQ 4.9's ComparisonExpression, LogicExpression, UnaryExpression):
//   - A missing property is NULL. Every comparison with NULL, and IN, NOT IN, BETWEEN and
//     NOT BETWEEN on it, is UNKNOWN; NOT UNKNOWN is UNKNOWN; FALSE AND UNKNOWN is FALSE,
//     TRUE OR UNKNOWN is TRUE, other AND/OR mixes with UNKNOWN are UNKNOWN. So for a missing
//     property only IS NULL is true; <>, NOT, NOT IN and NOT BETWEEN are not.
//   - Property values are strings. Against a number the string is converted to the
//     number's type: an integer literal parses it as a Java long ("1.5" or " 1" fail), a
//     decimal literal as a Java double (Double.valueOf: "1", "1.5", "1e3", " 2 ", "NaN"
//     pass). A failed conversion is an evaluation error: no match, even under <> or NOT.
//     So "a > 1" does not match a = '1.5' (RocketMQ: Integer.valueOf throws); write
//     "a > 1.0" to compare decimals.
//   - Two numbers of different types compare as doubles; doubles order like Java's
//     Double.compareTo (-0.0 < 0.0; NaN is above everything and equals itself).
//   - = and <> between strings compare exactly. > >= < <= between two strings (two
//     properties) convert both to doubles, else error: strings are never ordered as text.
//   - Against TRUE/FALSE a string converts like Java's Boolean.valueOf: "true" in any case
//     is TRUE, anything else FALSE (so a = FALSE matches a = 'no').
//   - A bare property used as a condition is NULL when missing, FALSE otherwise; unary
//     minus on anything but a number is NULL.
//   - AND and OR evaluate left to right and stop at the first FALSE (AND) / TRUE (OR), as
//     RocketMQ does; an error raised before that point fails the message, one after it is
//     never reached. BETWEEN is (x >= lo AND x <= hi), NOT BETWEEN is (x < lo OR x > hi).
//
// Deliberate deviations from RocketMQ, each where its behaviour is a defect:
//   - RocketMQ's = yields FALSE (not NULL) when only its right operand is NULL and TRUE when
//     both are, so there "'x' <> a" and "a <> b" are TRUE for a missing a or b. Here any NULL
//     operand of = and <> gives UNKNOWN, so only IS NULL is ever true for a missing property.
//   - RocketMQ throws a ClassCastException for "TRUE = a" when a is present; here the
//     operands of = are symmetric ("TRUE = a" is "a = TRUE").
//   - RocketMQ narrows integer literals that fit in 32 bits to Java int and then fails to
//     convert larger property values ("ts > 1700000000" errors for ts='1700000000000');
//     here every integer is a 64-bit long.
//   - RocketMQ refuses decimal literals below Double.MIN_VALUE, including 0.0; here 0.0
//     (and underflowing literals, which become 0) are accepted.
//   - Negative numeric literals are folded into constants, so BETWEEN's bound check also
//     covers "BETWEEN -1 AND -5" (RocketMQ checks only unsigned bounds).
//   - A "--" comment may end at the end of the expression (RocketMQ needs a newline).
//
// Evaluate does not allocate unless evaluation fails; [SQLFilter.EvaluateErr] also says
// why evaluation failed.
func (f *SQLFilter) Evaluate(props map[string]string) bool {
	ok, _ := f.EvaluateErr(props)
	return ok
}

// EvaluateErr is [SQLFilter.Evaluate] that also returns the *[SQLEvalError] that made
// the message not match, if any (nil for a FALSE or UNKNOWN result). Useful for logging,
// as RocketMQ's broker logs filter errors.
func (f *SQLFilter) EvaluateErr(props map[string]string) (bool, error) {
	src := propSource{m: props}
	return f.run(&src)
}

func (f *SQLFilter) run(src *propSource) (bool, error) {
	v, err := f.root.eval(src)
	if err != nil {
		return false, err
	}
	return v.k == kBool && v.b, nil
}

// MatchTagsCode always returns true: a SQL92 filter cannot decide from the consume
// queue's tag code and decides in MatchRecord. Part of the store's filter interface.
func (f *SQLFilter) MatchTagsCode(tagsCode int64) bool { return true }

// MatchRecord evaluates the filter on the properties of a raw stored record (docs/protocol.md
// §4.1) without decoding the rest of it or building a map. A record that cannot be parsed
// does not match. rec is not retained. Part of the store's filter interface.
func (f *SQLFilter) MatchRecord(rec []byte) bool {
	raw, ok := recordProperties(rec)
	if !ok {
		return false
	}
	src := propSource{raw: raw, isR: true}
	matched, _ := f.run(&src)
	return matched
}

// MatchProperties evaluates the filter on a raw RocketMQ properties string (name 0x01
// value 0x02 ..., as [message.MarshalProperties] writes it) without building a map.
func (f *SQLFilter) MatchProperties(properties string) bool {
	src := propSource{raw: properties, isR: true}
	matched, _ := f.run(&src)
	return matched
}
