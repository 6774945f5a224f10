package filter

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/message"
)

// propNames collects the property names a compiled expression reads.
func propNames(n *node, into map[string]bool) {
	if n.op == opProp {
		into[n.name] = true
	}
	for _, k := range n.kids {
		propNames(k, into)
	}
}

// FuzzCompileSQL92 compiles arbitrary text and, when it compiles, evaluates it on
// properties taken from vals (comma-separated values assigned to the expression's property
// names in order; "-" leaves one missing). It checks that nothing panics or hangs, that
// errors are *SQLSyntaxError / *SQLEvalError with positions inside the expression, that the
// parenthesised form re-compiles to the same tree with the same results, and that the map
// and raw-properties evaluation paths agree.
func FuzzCompileSQL92(f *testing.F) {
	for _, row := range sqlEvalTable {
		vals := []string{}
		for _, c := range row.cases {
			for _, v := range c.props {
				vals = append(vals, v)
			}
		}
		f.Add(row.expr, strings.Join(vals, ","))
	}
	for _, s := range []string{
		"", "a = 'abc", "a != 1", "a = 1 AND", "a BETWEEN 1", "a IN ()", "a IN (1)", "(((a = 1)", "a = 1))",
		"/* x", "-- x", "a = 1 -- x", "a.b = 1", "a = 007", "a > 1e400", "NOT NOT NOT a", "- - - 1 = a",
		"a BETWEEN 5 AND 1", "a BETWEEN NULL AND 1", "a = NULL", "TRUE = 1", "'x' > 1", "a = 1 = TRUE = FALSE",
		"a IS NULL IS NOT NULL", "a > b AND c < d OR e BETWEEN f AND g", "TAGS IN ('a','b','c','d','e','f','g','h','i')",
	} {
		f.Add(s, "1,x,-,2.5,true,,NaN")
	}
	f.Fuzz(func(t *testing.T, expr, vals string) {
		flt, err := CompileSQL92(expr)
		if err != nil {
			var se *SQLSyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("CompileSQL92(%q): error %T %v is not a *SQLSyntaxError", expr, err, err)
			}
			if se.Pos < 0 || se.Pos > len(expr) || se.Reason == "" {
				t.Fatalf("CompileSQL92(%q): bad error %+v", expr, se)
			}
			return
		}
		if flt.Expression() != expr {
			t.Fatalf("Expression() = %q, want %q", flt.Expression(), expr)
		}
		names := map[string]bool{}
		propNames(flt.root, names)
		sorted := make([]string, 0, len(names))
		for n := range names {
			sorted = append(sorted, n)
		}
		// Deterministic assignment: sort names.
		for i := 1; i < len(sorted); i++ {
			for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
				sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
			}
		}
		pieces := strings.Split(vals, ",")
		props := map[string]string{}
		for i, n := range sorted {
			if p := pieces[i%len(pieces)]; p != "-" && p != "" && !strings.ContainsAny(p, "\x01\x02") {
				props[n] = p
			}
		}
		got, evalErr := flt.EvaluateErr(props)
		if evalErr != nil {
			var ee *SQLEvalError
			if !errors.As(evalErr, &ee) || ee.Pos < 0 || ee.Pos >= len(expr) || got {
				t.Fatalf("%q on %v: bad evaluation error %v (matched %v)", expr, props, evalErr, got)
			}
		}
		if flt.Evaluate(props) != got {
			t.Fatalf("Evaluate and EvaluateErr disagree on %q %v", expr, props)
		}
		if raw := flt.MatchProperties(message.MarshalProperties(props)); raw != got {
			t.Fatalf("%q on %v: map path %v, raw path %v", expr, props, got, raw)
		}
		// The parenthesised form means the same thing (it may exceed the limits, being longer
		// and more nested).
		again, err := CompileSQL92(flt.String())
		if err != nil {
			if strings.Contains(err.Error(), "deeper than") || strings.Contains(err.Error(), "longer than the limit") {
				return
			}
			t.Fatalf("%q printed as %q, which does not compile: %v", expr, flt.String(), err)
		}
		if again.String() != flt.String() {
			t.Fatalf("%q printed as %q, re-parsed as %q", expr, flt.String(), again.String())
		}
		if again.Evaluate(props) != got {
			t.Fatalf("%q and its printed form %q disagree on %v", expr, flt.String(), props)
		}
	})
}
