package filter

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/sluicemq/sluice/message"
)

// P builds a property map from name, value pairs.
func P(kv ...string) map[string]string {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// outcome evaluates f on props white-box: "T" TRUE, "F" FALSE, "N" NULL/UNKNOWN, "E" an
// evaluation error.
func outcome(f *SQLFilter, props map[string]string) string {
	v, err := f.root.eval(&propSource{m: props})
	switch {
	case err != nil:
		return "E"
	case v.k == kNull:
		return "N"
	case v.k == kBool && v.b:
		return "T"
	case v.k == kBool:
		return "F"
	}
	return "?" + v.literal()
}

type sqlCase struct {
	props map[string]string
	want  string // T, F, N (unknown) or E (evaluation error)
}

// sqlEvalTable holds expressions and, for each, property sets with the expected three-valued
// result. Evaluate must be true exactly for "T".
var sqlEvalTable = []struct {
	expr  string
	cases []sqlCase
}{
	// = and <> against integers: the property is parsed as a Java long.
	{"a = 1", []sqlCase{{P("a", "1"), "T"}, {P("a", "2"), "F"}, {nil, "N"}, {P("b", "1"), "N"}, {P("a", "+1"), "T"},
		{P("a", "1.0"), "E"}, {P("a", "x"), "E"}, {P("a", " 1"), "E"}}},
	{"a <> 1", []sqlCase{{P("a", "2"), "T"}, {P("a", "1"), "F"}, {nil, "N"}, {P("a", "x"), "E"}}},
	{"a = -1", []sqlCase{{P("a", "-1"), "T"}, {P("a", "1"), "F"}}},
	{"a = +1", []sqlCase{{P("a", "1"), "T"}}},
	{"a = 1L", []sqlCase{{P("a", "1"), "T"}}},
	{"1 = a", []sqlCase{{P("a", "1"), "T"}, {P("a", "2"), "F"}, {nil, "N"}}},
	// Integer literal against a decimal property: an error (RocketMQ: Integer.valueOf("1.5")).
	{"a > 1", []sqlCase{{P("a", "2"), "T"}, {P("a", "1"), "F"}, {P("a", "-7"), "F"}, {nil, "N"},
		{P("a", "1.5"), "E"}, {P("a", "3000000000"), "T"}, {P("a", "9223372036854775808"), "E"}}},
	{"a >= 1", []sqlCase{{P("a", "1"), "T"}, {P("a", "0"), "F"}, {nil, "N"}}},
	{"a < 10", []sqlCase{{P("a", "9"), "T"}, {P("a", "10"), "F"}, {P("a", "-5"), "T"}, {nil, "N"}}},
	{"a <= 10", []sqlCase{{P("a", "10"), "T"}, {P("a", "11"), "F"}, {nil, "N"}}},
	{"a > -1", []sqlCase{{P("a", "0"), "T"}, {P("a", "-2"), "F"}}},
	{"ts > 1700000000", []sqlCase{{P("ts", "1700000000001"), "T"}, {P("ts", "1600000000"), "F"}}},
	{"a = 9223372036854775807", []sqlCase{{P("a", "9223372036854775807"), "T"}, {P("a", "9223372036854775808"), "E"}}},
	// Decimal literals: the property is parsed like Java's Double.valueOf.
	{"a > 1.0", []sqlCase{{P("a", "1.5"), "T"}, {P("a", "1"), "F"}, {P("a", "1e1"), "T"}, {P("a", " 2 "), "T"},
		{P("a", "2f"), "T"}, {P("a", "0x1p1"), "T"}, {P("a", "NaN"), "T"}, {P("a", "Infinity"), "T"},
		{P("a", "-Infinity"), "F"}, {P("a", "inf"), "E"}, {P("a", "abc"), "E"}, {P("a", "1_0"), "E"}, {P("a", ""), "E"}, {nil, "N"}}},
	{"a = 1.5", []sqlCase{{P("a", "1.5"), "T"}, {P("a", "1.50"), "T"}, {P("a", "15e-1"), "T"}, {P("a", "3/2"), "E"}}},
	{"a = 2.0", []sqlCase{{P("a", "2"), "T"}, {P("a", "2.1"), "F"}}},
	{"a = .5", []sqlCase{{P("a", "0.5"), "T"}}},
	{"a = 5.", []sqlCase{{P("a", "5"), "T"}}},
	{"a > 1E2", []sqlCase{{P("a", "101"), "T"}, {P("a", "100"), "F"}}},
	{"a = 0.0", []sqlCase{{P("a", "0"), "T"}, {P("a", "-0"), "F"}}}, // Java Double.compareTo: -0.0 < 0.0
	{"a < -1.5", []sqlCase{{P("a", "-2"), "T"}, {P("a", "-1.5"), "F"}}},
	// Two properties: = compares text, ordering converts both to doubles.
	{"a = b", []sqlCase{{P("a", "x", "b", "x"), "T"}, {P("a", "x", "b", "y"), "F"}, {P("a", "1", "b", "1.0"), "F"},
		{P("a", "x"), "N"}, {P("b", "x"), "N"}, {nil, "N"}}},
	{"a <> b", []sqlCase{{P("a", "x", "b", "y"), "T"}, {P("a", "x"), "N"}, {nil, "N"}}},
	{"a > b", []sqlCase{{P("a", "10", "b", "9"), "T"}, {P("a", "9", "b", "10"), "F"}, {P("a", "x", "b", "1"), "E"},
		{P("a", "1", "b", "x"), "E"}, {P("a", "1"), "N"}}},
	{"a >= b", []sqlCase{{P("a", "1", "b", "1.0"), "T"}}},
	// Strings.
	{"a = 'abc'", []sqlCase{{P("a", "abc"), "T"}, {P("a", "ABC"), "F"}, {P("a", "abc "), "F"}, {nil, "N"}}},
	{"a <> 'abc'", []sqlCase{{P("a", "abd"), "T"}, {P("a", "abc"), "F"}, {nil, "N"}}},
	{"'x' <> a", []sqlCase{{P("a", "y"), "T"}, {P("a", "x"), "F"}, {nil, "N"}}},
	{"a = 'it''s'", []sqlCase{{P("a", "it's"), "T"}, {P("a", "its"), "F"}}},
	{"a = ''", []sqlCase{{P("a", ""), "T"}, {P("a", " "), "F"}}},
	{"a = '1'", []sqlCase{{P("a", "1"), "T"}, {P("a", "01"), "F"}}},
	{"A = 'x'", []sqlCase{{P("a", "x"), "N"}, {P("A", "x"), "T"}}},
	{"TAGS = 'TagA'", []sqlCase{{P("TAGS", "TagA"), "T"}, {P("TAGS", "TagB"), "F"}, {P("tags", "TagA"), "N"}}},
	{"TAGS is not null and TAGS='''''tag'''''", []sqlCase{{P("TAGS", "''tag''"), "T"}}},
	{"$x_1 = 'v'", []sqlCase{{P("$x_1", "v"), "T"}}},
	// Booleans: a string converts like Java Boolean.valueOf.
	{"a = TRUE", []sqlCase{{P("a", "true"), "T"}, {P("a", "TRUE"), "T"}, {P("a", "yes"), "F"}, {nil, "N"}}},
	{"a = FALSE", []sqlCase{{P("a", "false"), "T"}, {P("a", "no"), "T"}, {P("a", "True"), "F"}}},
	{"TRUE = a", []sqlCase{{P("a", "true"), "T"}, {P("a", "false"), "F"}, {nil, "N"}}},
	{"a <> TRUE", []sqlCase{{P("a", "false"), "T"}, {P("a", "true"), "F"}, {nil, "N"}}},
	{"TRUE", []sqlCase{{nil, "T"}}},
	{"FALSE", []sqlCase{{nil, "F"}}},
	{"NULL", []sqlCase{{nil, "N"}}},
	{"TRUE = TRUE", []sqlCase{{nil, "T"}}},
	// A bare property as a condition: NULL when missing, FALSE for any string.
	{"a", []sqlCase{{P("a", "true"), "F"}, {nil, "N"}}},
	{"NOT a", []sqlCase{{P("a", "x"), "T"}, {nil, "N"}}},
	{"a OR b = 1", []sqlCase{{P("a", "true", "b", "1"), "T"}, {P("a", "true", "b", "2"), "F"}}},
	// AND, OR, NOT with three-valued logic.
	{"a = 1 AND b = 1", []sqlCase{{P("a", "1", "b", "1"), "T"}, {P("a", "1", "b", "2"), "F"}, {P("a", "1"), "N"},
		{P("a", "2"), "F"}, {P("b", "2"), "F"}, {P("b", "1"), "N"}, {nil, "N"}}},
	{"a = 1 OR b = 1", []sqlCase{{P("a", "1"), "T"}, {P("b", "1"), "T"}, {P("a", "2"), "N"}, {P("a", "2", "b", "2"), "F"}, {nil, "N"}}},
	{"NOT (a = 1)", []sqlCase{{P("a", "2"), "T"}, {P("a", "1"), "F"}, {nil, "N"}, {P("a", "x"), "E"}}},
	{"NOT NOT (a = 1)", []sqlCase{{P("a", "1"), "T"}, {P("a", "2"), "F"}, {nil, "N"}}},
	{"NOT (a = 1 AND b = 1)", []sqlCase{{P("a", "2"), "T"}, {P("a", "1"), "N"}}},
	{"NOT (a = 1 OR b = 1)", []sqlCase{{P("a", "2", "b", "2"), "T"}, {P("a", "2"), "N"}, {P("b", "1"), "F"}}},
	// NOT binds tighter than comparisons (RocketMQ grammar): (NOT a) = 1 compares a boolean
	// with a number, which is never equal.
	{"NOT a = 1", []sqlCase{{P("a", "2"), "F"}, {P("a", "1"), "F"}, {nil, "N"}}},
	{"NOT a IS NULL", []sqlCase{{nil, "T"}, {P("a", "x"), "F"}}},
	// AND binds tighter than OR.
	{"a = 1 OR b = 1 AND c = 1", []sqlCase{{P("a", "1"), "T"}, {P("a", "2", "b", "1", "c", "2"), "F"}, {P("b", "1", "c", "1"), "T"}}},
	{"(a = 1 OR b = 1) AND c = 1", []sqlCase{{P("a", "1", "c", "2"), "F"}, {P("a", "1", "c", "1"), "T"}, {P("a", "1"), "N"}}},
	{"a = 1 AND b = 1 OR c = 1", []sqlCase{{P("c", "1"), "T"}, {P("a", "1", "b", "1"), "T"}, {P("a", "1", "c", "2"), "N"}}},
	// Evaluation stops as RocketMQ's does: an error past the deciding operand is never raised.
	{"a = 1 OR b = 1", []sqlCase{{P("a", "1", "b", "x"), "T"}, {P("a", "2", "b", "x"), "E"}}},
	{"b = 1 OR a = 1", []sqlCase{{P("a", "1", "b", "x"), "E"}}},
	{"a = 2 AND b = 1", []sqlCase{{P("a", "1", "b", "x"), "F"}}},
	{"NOT (a = 2 AND b = 1)", []sqlCase{{P("a", "1", "b", "x"), "T"}}},
	// BETWEEN is (x >= lo AND x <= hi), NOT BETWEEN is (x < lo OR x > hi).
	{"a BETWEEN 1 AND 5", []sqlCase{{P("a", "1"), "T"}, {P("a", "5"), "T"}, {P("a", "3"), "T"}, {P("a", "0"), "F"},
		{P("a", "6"), "F"}, {nil, "N"}, {P("a", "x"), "E"}, {P("a", "2.5"), "E"}}},
	{"a BETWEEN 1.0 AND 5", []sqlCase{{P("a", "3"), "T"}, {P("a", "2.5"), "E"}, {P("a", "0.5"), "F"}}},
	{"a BETWEEN 1.5 AND 2.5", []sqlCase{{P("a", "2"), "T"}, {P("a", "2.5"), "T"}, {P("a", "2.6"), "F"}}},
	{"a BETWEEN -5 AND -1", []sqlCase{{P("a", "-3"), "T"}, {P("a", "0"), "F"}}},
	{"a BETWEEN 3 AND 3", []sqlCase{{P("a", "3"), "T"}, {P("a", "4"), "F"}}},
	{"a NOT BETWEEN 1 AND 5", []sqlCase{{P("a", "0"), "T"}, {P("a", "6"), "T"}, {P("a", "3"), "F"}, {P("a", "1"), "F"},
		{nil, "N"}, {P("a", "x"), "E"}}},
	{"a NOT BETWEEN 5 AND 1", []sqlCase{{P("a", "3"), "T"}}}, // NOT BETWEEN does not check bound order (RocketMQ)
	{"a BETWEEN b AND c", []sqlCase{{P("a", "3", "b", "1", "c", "5"), "T"}, {P("a", "3", "b", "1"), "N"},
		{P("a", "0", "b", "1"), "F"}, {P("a", "3", "b", "up", "c", "5"), "E"}}},
	{"a NOT BETWEEN b AND c", []sqlCase{{P("a", "0", "b", "1"), "T"}, {P("a", "3", "b", "1"), "N"}}},
	// IN compares strings exactly.
	{"a IN ('x', 'y')", []sqlCase{{P("a", "x"), "T"}, {P("a", "y"), "T"}, {P("a", "z"), "F"}, {P("a", "X"), "F"}, {nil, "N"}}},
	{"a NOT IN ('x', 'y')", []sqlCase{{P("a", "z"), "T"}, {P("a", "x"), "F"}, {nil, "N"}}},
	{"a IN ('1')", []sqlCase{{P("a", "1"), "T"}, {P("a", "1.0"), "F"}}},
	{"TAGS IN ('TagA', 'TagB') AND a > 2", []sqlCase{{P("TAGS", "TagB", "a", "3"), "T"}, {P("TAGS", "TagC", "a", "3"), "F"}}},
	{"a in ('1','2','3','4','5','6','7','8','9','10')", []sqlCase{{P("a", "10"), "T"}, {P("a", "11"), "F"}, {nil, "N"}}},
	{"a not in ('1','2','3','4','5','6','7','8','9','10')", []sqlCase{{P("a", "11"), "T"}, {P("a", "7"), "F"}, {nil, "N"}}},
	{"(a) IN ('x')", []sqlCase{{P("a", "x"), "T"}}},
	// IS [NOT] NULL: the only operators true for a missing property.
	{"a IS NULL", []sqlCase{{nil, "T"}, {P("a", "x"), "F"}}},
	{"a IS NOT NULL", []sqlCase{{P("a", "x"), "T"}, {nil, "F"}}},
	{"(a = 1) IS NULL", []sqlCase{{nil, "T"}, {P("a", "1"), "F"}}},
	{"a IS NULL OR a = 'hello'", []sqlCase{{nil, "T"}, {P("a", "hello"), "T"}, {P("a", "abc"), "F"}}},
	{"-a IS NULL", []sqlCase{{P("a", "1"), "T"}}}, // unary minus on a string is NULL
	{"NULL IS NULL", []sqlCase{{nil, "T"}}},
	{"1 IS NOT NULL", []sqlCase{{nil, "T"}}},
	// Chained equalities and constants.
	{"a = 1 = TRUE", []sqlCase{{P("a", "1"), "T"}, {P("a", "2"), "F"}, {nil, "N"}}},
	{"(a = 1) = (b = 1)", []sqlCase{{P("a", "1", "b", "1"), "T"}, {P("a", "1", "b", "2"), "F"}, {P("a", "2", "b", "2"), "T"}, {P("a", "1"), "N"}}},
	{"(a > 1) = 'true'", []sqlCase{{P("a", "2"), "T"}, {P("a", "0"), "F"}}},
	{"1 = 1", []sqlCase{{nil, "T"}}},
	{"1 = 1.0", []sqlCase{{nil, "T"}}},
	{"1 < 2", []sqlCase{{nil, "T"}}},
	{"'a' = 'a'", []sqlCase{{nil, "T"}}},
	{"1 = '1'", []sqlCase{{nil, "T"}}},
	{"1 = 'x'", []sqlCase{{nil, "E"}}},
	// Syntax niceties: keywords in any case, comments, whitespace.
	{"a between 1 and 2 or b is not null", []sqlCase{{P("b", "x"), "T"}, {P("a", "3"), "F"}, {P("a", "x", "b", "x"), "E"}}},
	{"a = 1 -- the rest is a comment", []sqlCase{{P("a", "1"), "T"}}},
	{"a = 1 -- comment\n AND b = 2", []sqlCase{{P("a", "1", "b", "2"), "T"}, {P("a", "1", "b", "1"), "F"}}},
	{"/* leading */ a /* mid */ = 1", []sqlCase{{P("a", "1"), "T"}}},
	{"\ta\r\n=\f1 ", []sqlCase{{P("a", "1"), "T"}}},
	{"a=3 and b<>4 And c>5 AND d<=4", []sqlCase{{P("a", "3", "b", "5", "c", "6", "d", "1"), "T"}, {P("a", "4", "b", "5", "c", "6", "d", "1"), "F"}}},
	{"notes = 'x' AND android = 'y' AND island IS NULL", []sqlCase{{P("notes", "x", "android", "y"), "T"}}},
}

func TestSQL92EvaluateTable(t *testing.T) {
	total := 0
	for _, row := range sqlEvalTable {
		f, err := CompileSQL92(row.expr)
		if err != nil {
			t.Errorf("CompileSQL92(%q): %v", row.expr, err)
			continue
		}
		if f.Expression() != row.expr {
			t.Errorf("Expression() = %q, want %q", f.Expression(), row.expr)
		}
		for _, c := range row.cases {
			total++
			if got := outcome(f, c.props); got != c.want {
				t.Errorf("%q with %v: got %s, want %s (parsed as %s)", row.expr, c.props, got, c.want, f)
			}
			if got := f.Evaluate(c.props); got != (c.want == "T") {
				t.Errorf("Evaluate(%q, %v) = %v, want %v", row.expr, c.props, got, c.want == "T")
			}
			_, err := f.EvaluateErr(c.props)
			var ee *SQLEvalError
			if (c.want == "E") != errors.As(err, &ee) {
				t.Errorf("EvaluateErr(%q, %v) error = %v, want an error: %v", row.expr, c.props, err, c.want == "E")
			}
			if ee != nil && (ee.Pos < 0 || ee.Pos >= len(row.expr) || !strings.Contains(ee.Error(), fmt.Sprintf("byte %d", ee.Pos))) {
				t.Errorf("%q: bad evaluation error %v", row.expr, ee)
			}
			// The raw-properties path (used by MatchRecord) must agree with the map path.
			if !hasEmptyValue(c.props) {
				if got := f.MatchProperties(message.MarshalProperties(c.props)); got != (c.want == "T") {
					t.Errorf("MatchProperties(%q, %v) = %v", row.expr, c.props, got)
				}
			}
		}
	}
	t.Logf("%d expressions, %d property sets", len(sqlEvalTable), total)
}

func hasEmptyValue(m map[string]string) bool {
	for _, v := range m {
		if v == "" {
			return true
		}
	}
	return false
}

// TestSQL92Parse checks precedence, associativity and folding through the parsed form.
func TestSQL92Parse(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{"a = 1 OR b = 2 AND c = 3", "((a = 1) OR ((b = 2) AND (c = 3)))"},
		{"a = 1 AND b = 2 AND c = 3", "((a = 1) AND (b = 2) AND (c = 3))"},
		{"(a = 1 AND b = 2) AND (c = 3 AND d = 4)", "((a = 1) AND (b = 2) AND (c = 3) AND (d = 4))"},
		{"(a = 1 OR b = 2) AND c = 3", "(((a = 1) OR (b = 2)) AND (c = 3))"},
		{"NOT a = 1", "((NOT a) = 1)"},
		{"NOT (a = 1)", "(NOT (a = 1))"},
		{"a = 1 = TRUE", "((a = 1) = TRUE)"},
		{"a > 1 = TRUE", "((a > 1) = TRUE)"},
		{"a BETWEEN 1 AND 2 AND b = 3", "((a BETWEEN 1 AND 2) AND (b = 3))"},
		{"a NOT BETWEEN -2 AND - -3", "(a NOT BETWEEN -2 AND 3)"},
		{"a NOT IN ('x', 'it''s')", "(a NOT IN ('x', 'it''s'))"},
		{"a IS NOT NULL OR a IS NULL", "((a IS NOT NULL) OR (a IS NULL))"},
		{"a > 1.5e3", "(a > 1500.0)"},
		{"a = -0.0", "(a = -0.0)"},
		{"a = +-+1", "(a = -1)"},
		{"-a IS NULL", "((- a) IS NULL)"},
		{"a = 1 or B = 2", "((a = 1) OR (B = 2))"},
	} {
		f, err := CompileSQL92(c.expr)
		if err != nil {
			t.Errorf("CompileSQL92(%q): %v", c.expr, err)
			continue
		}
		if got := f.String(); got != c.want {
			t.Errorf("%q parsed as %s, want %s", c.expr, got, c.want)
		}
	}
}

func TestSQL92SyntaxErrors(t *testing.T) {
	long := "a = '" + strings.Repeat("x", MaxSQLLength) + "'"
	deepParens := strings.Repeat("(", MaxSQLDepth+1) + "a = 1" + strings.Repeat(")", MaxSQLDepth+1)
	deepNot := strings.Repeat("NOT ", MaxSQLDepth+1) + "a"
	deepChain := "a" + strings.Repeat(" IS NULL", MaxSQLDepth) // the last IS makes the tree 101 high
	inList := func(n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf("'%d'", i)
		}
		return "a IN (" + strings.Join(items, ",") + ")"
	}
	bigIn := inList(MaxSQLInList + 1)
	for _, c := range []struct {
		expr   string
		pos    int
		reason string // a fragment of the reason
	}{
		{"", 0, "empty expression"},
		{"   ", 3, "empty expression"},
		{"a = 'abc", 4, "unterminated string"},
		{"a = 'it''s", 4, "unterminated string"},
		{"/* x", 0, "unterminated comment"},
		{"a != 1", 2, "unknown operator '!='"},
		{"a == 1", 3, "found '='"},
		{"a && b", 2, "unknown operator '&&'"},
		{"a = \"x\"", 4, "single quotes"},
		{"a = é", 4, "U+00E9"},
		{"a.b = 1", 1, "property names"},
		{"a = 1 AND", 9, "unexpected end"},
		{"a = 1 AND AND b = 1", 10, "found AND"},
		{"AND a = 1", 0, "found AND"},
		{"a = 1 OR", 8, "unexpected end"},
		{"a =", 3, "unexpected end"},
		{"a BETWEEN 1", 11, "expected AND"},
		{"a BETWEEN 1 OR 2", 12, "expected AND"},
		{"a BETWEEN 1 AND", 15, "unexpected end"},
		{"a IN ()", 6, "empty IN list"},
		{"a NOT IN ()", 10, "empty NOT IN list"},
		{"a IN (1, 2)", 6, "expected a string literal"},
		{"a IN ('x',)", 10, "expected a string literal"},
		{"a IN ('x'", 9, "expected ',' or ')'"},
		{"a IN 'x'", 5, "expected '('"},
		{"'a' IN ('a')", 0, "needs a property name"},
		{"a = 1 IN ('x')", 4, "needs a property name"},
		{"(a = 1", 6, "expected ')'"},
		{"a = 1)", 5, "unexpected ')'"},
		{"a = 1 b = 2", 6, "unexpected property name"},
		{"a NOT = 1", 2, "unexpected NOT"},
		{"a IS 1", 5, "expected NULL"},
		{"a IS NOT 1", 9, "expected NULL"},
		{"a = NULL", 4, "NULL cannot be compared"},
		{"NULL <> a", 0, "NULL cannot be compared"},
		{"TRUE = 1", 5, "cannot be compared"},
		{"'x' > 1", 0, "not a number"},
		{"a > 'x'", 4, "not a number"},
		{"a >= TRUE", 5, "not a number"},
		{"a < NULL", 4, "not a number"},
		{"a < (b = 1)", 5, "is a condition"},
		{"a > 1 > 2", 0, "is a condition"},
		{"a BETWEEN 5 AND 1", 10, "greater than upper bound"},
		{"a BETWEEN 1.5 AND 1", 10, "greater than upper bound"},
		{"a BETWEEN -1 AND -5", 10, "greater than upper bound"},
		{"a BETWEEN NULL AND 1", 2, "cannot be NULL"},
		{"a BETWEEN 'a' AND 'b'", 10, "not a number"},
		{"a NOT BETWEEN 1 AND 'b'", 20, "not a number"},
		{"1", 0, "not a boolean"},
		{"'abc'", 0, "not a boolean"},
		{"-a", 0, "not a boolean"},
		{"a = 1 AND 2", 10, "not a boolean"},
		{"2 OR a = 1", 0, "not a boolean"},
		{"NOT 1", 4, "not a boolean"},
		{"a = 007", 4, "leading zero"},
		{"a = 12abc", 4, "malformed number"},
		{"a = 1.5L", 4, "malformed number"},
		{"a = 1.2.3", 4, "malformed number"},
		{"a > 1e", 4, "malformed number"},
		{"a = 99999999999999999999", 4, "out of range"},
		{"a > 1e400", 4, "out of range"},
		{"a = .", 4, "unexpected '.'"},
		{long, MaxSQLLength, "longer than the limit"},
		{deepParens, MaxSQLDepth, "deeper than"},
		{deepNot, 4 * MaxSQLDepth, "deeper than"},
		{deepChain, len(deepChain) - len("IS NULL"), "deeper than"},
		{bigIn, strings.Index(bigIn, fmt.Sprintf("'%d'", MaxSQLInList)), "longer than 1024"},
	} {
		f, err := CompileSQL92(c.expr)
		var se *SQLSyntaxError
		if !errors.As(err, &se) {
			t.Errorf("CompileSQL92(%.60q) = %v, %v; want a *SQLSyntaxError", c.expr, f, err)
			continue
		}
		if se.Pos != c.pos || !strings.Contains(se.Reason, c.reason) {
			t.Errorf("CompileSQL92(%.60q): got pos %d %q, want pos %d and %q", c.expr, se.Pos, se.Reason, c.pos, c.reason)
		}
		if want := fmt.Sprintf("sql92 syntax error at byte %d: %s", se.Pos, se.Reason); err.Error() != want {
			t.Errorf("Error() = %q, want %q", err.Error(), want)
		}
	}
	// Just inside the limits compiles.
	within := []string{
		strings.Repeat("(", MaxSQLDepth) + "a = 1" + strings.Repeat(")", MaxSQLDepth),
		strings.Repeat("NOT ", MaxSQLDepth-2) + "a", // NOT over a bare property: cast + NOTs
		inList(MaxSQLInList),
		"a" + strings.Repeat(" IS NULL", MaxSQLDepth-1),
		"a = '" + strings.Repeat("x", MaxSQLLength-6) + "'",
		strings.TrimSuffix(strings.Repeat("a = 1 AND ", 1500), " AND "), // long AND chains are flat
	}
	for _, e := range within {
		if _, err := CompileSQL92(e); err != nil {
			t.Errorf("CompileSQL92(%.60q...) (%d bytes): %v", e, len(e), err)
		}
	}
}

func sqlRecord(t testing.TB, props map[string]string, v6 bool) []byte {
	t.Helper()
	host := netip.MustParseAddrPort("127.0.0.1:10911")
	if v6 {
		host = netip.MustParseAddrPort("[::1]:10911")
	}
	m := &message.MessageExt{Message: message.Message{Topic: "T", Body: []byte("body"), Properties: props}, StoreHost: host, BornHost: host}
	b, err := message.EncodeRecord(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSQL92MatchRecord runs the filter on real stored records, as the store does.
func TestSQL92MatchRecord(t *testing.T) {
	f, err := CompileSQL92("TAGS IN ('TagA', 'TagB') AND region = 'eu' AND price BETWEEN 10 AND 20")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		props map[string]string
		v6    bool
		want  bool
	}{
		{P("TAGS", "TagA", "region", "eu", "price", "15"), false, true},
		{P("TAGS", "TagB", "region", "eu", "price", "10", "KEYS", "k1 k2"), true, true},
		{P("TAGS", "TagC", "region", "eu", "price", "15"), false, false},
		{P("TAGS", "TagA", "region", "us", "price", "15"), false, false},
		{P("TAGS", "TagA", "region", "eu", "price", "25"), false, false},
		{P("TAGS", "TagA", "region", "eu"), false, false},
		{P("TAGS", "TagA", "region", "eu", "price", "cheap"), false, false},
		{nil, false, false},
	} {
		rec := sqlRecord(t, c.props, c.v6)
		if !f.MatchTagsCode(message.TagHashCode(c.props["TAGS"])) {
			t.Fatal("MatchTagsCode must always be true")
		}
		if got := f.MatchRecord(rec); got != c.want {
			t.Errorf("MatchRecord(%v) = %v, want %v", c.props, got, c.want)
		}
		if got := f.Evaluate(c.props); got != c.want {
			t.Errorf("Evaluate(%v) = %v, want %v", c.props, got, c.want)
		}
	}
	good := sqlRecord(t, P("TAGS", "TagA", "region", "eu", "price", "15"), false)
	for _, bad := range [][]byte{nil, {1, 2, 3}, good[:len(good)-3], good[:60]} {
		if f.MatchRecord(bad) {
			t.Errorf("a truncated record (%d bytes) matched", len(bad))
		}
	}
	// Later duplicates win and empty pieces are skipped, as message.UnmarshalProperties does.
	g, _ := CompileSQL92("a = 'new' AND b IS NULL")
	for raw, want := range map[string]bool{
		"a\x01old\x02a\x01new":         true,
		"a\x01new\x02a\x01old":         false,
		"a\x01new\x02b\x01\x02":        true,
		"a\x01new\x02\x01b\x02ab\x01x": true,
		"aa\x01new":                    false,
		"a\x01new\x02b\x01x":           false,
	} {
		if got := g.MatchProperties(raw); got != want {
			t.Errorf("MatchProperties(%q) = %v, want %v", raw, got, want)
		}
		if got := g.Evaluate(message.UnmarshalProperties(raw)); got != want {
			t.Errorf("Evaluate(UnmarshalProperties(%q)) = %v, want %v", raw, got, want)
		}
	}
}

// TestSQL92Concurrent evaluates one filter from many goroutines (run with -race).
func TestSQL92Concurrent(t *testing.T) {
	f, err := CompileSQL92("a BETWEEN 1 AND 100 AND TAGS IN ('1','2','3','4','5','6','7','8','9')")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				props := P("a", fmt.Sprint(i%150), "TAGS", fmt.Sprint((i+g)%12))
				want := i%150 >= 1 && i%150 <= 100 && (i+g)%12 >= 1 && (i+g)%12 <= 9
				if f.Evaluate(props) != want {
					errs <- fmt.Errorf("goroutine %d: %v: got %v", g, props, !want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSQLCache(t *testing.T) {
	c := NewSQLCache(2)
	f1, err := c.Get("a = 1")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.Get("a = 1"); again != f1 {
		t.Fatal("a hit must return the cached filter")
	}
	_, err1 := c.Get("a = ")
	_, err2 := c.Get("a = ")
	var se *SQLSyntaxError
	if !errors.As(err1, &se) || err1 != err2 {
		t.Fatalf("errors are cached too: %v, %v", err1, err2)
	}
	if c.Len() != 2 {
		t.Fatalf("Len = %d, want 2", c.Len())
	}
	// LRU, not FIFO: "a = 1" was inserted first but used last, so "a = " goes first.
	if again, _ := c.Get("a = 1"); again != f1 {
		t.Fatal("a hit must return the cached filter")
	}
	fb, err := c.Get("b = 2")
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 2 {
		t.Fatalf("Len = %d after eviction, want 2", c.Len())
	}
	if again, _ := c.Get("a = 1"); again != f1 {
		t.Fatal("the most recently used expression was evicted")
	}
	if _, err := c.Get("a = "); err == err1 || err == nil {
		t.Fatalf("the least recently used expression was not evicted (err %v)", err)
	}
	// That miss evicted "b = 2" (least recently used now).
	if again, _ := c.Get("b = 2"); again == fb {
		t.Fatal(`"b = 2" should have been evicted`)
	}
	if _, err := c.Get(strings.Repeat(" ", MaxSQLLength+1)); err == nil || c.Len() > 2 {
		t.Fatalf("over-long expression: err %v, Len %d", err, c.Len())
	}
	if d := NewSQLCache(0); d.max != DefaultSQLCacheSize {
		t.Fatalf("default size %d", d.max)
	}

	// Concurrent use: every caller of one expression gets the same filter.
	shared := NewSQLCache(16)
	var wg sync.WaitGroup
	got := make([][]*SQLFilter, 8)
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				f, err := shared.Get(fmt.Sprintf("a = %d", i))
				if err != nil {
					t.Error(err)
					return
				}
				got[g] = append(got[g], f)
			}
		}()
	}
	wg.Wait()
	for g := range got {
		for i := range got[g] {
			if got[g][i] != got[0][i] {
				t.Fatalf("goroutine %d got a different filter for expression %d", g, i)
			}
		}
	}
}

func TestJavaParseDouble(t *testing.T) {
	for s, want := range map[string]float64{
		"1": 1, "-1.5": -1.5, "+.5": 0.5, "5.": 5, "1e3": 1000, "1E-2": 0.01, " \t7\n": 7,
		"2d": 2, "2F": 2, "0x10p0": 16, "0x1.8p1": 3, "0x1p1f": 2, "1e400": 0, // 1e400 is +Inf (checked below)
	} {
		got, err := javaParseDouble(s)
		if err != nil {
			t.Errorf("javaParseDouble(%q): %v", s, err)
			continue
		}
		if s == "1e400" {
			if javaCompareDouble(got, 1e308) <= 0 {
				t.Errorf("javaParseDouble(%q) = %v, want +Inf", s, got)
			}
			continue
		}
		if got != want {
			t.Errorf("javaParseDouble(%q) = %v, want %v", s, got, want)
		}
	}
	for _, s := range []string{"", " ", ".", "e5", "1e", "1e+", "inf", "Inf", "nan", "infinity", "1_000", "0x10", "0x", "1.5.2", "1f5", "--1", "+", "1 2", "0b1"} {
		if got, err := javaParseDouble(s); err == nil {
			t.Errorf("javaParseDouble(%q) = %v, want an error", s, got)
		}
	}
}
