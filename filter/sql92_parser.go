package filter

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// opcode is the operation of one node of a compiled SQL92 expression.
type opcode uint8

const (
	opConst      opcode = iota // val
	opProp                     // name: a message property, a string or missing (NULL)
	opBoolCast                 // a property used as a condition: NULL when missing, else FALSE
	opNeg                      // -x: numbers negate, anything else is NULL
	opNot                      // NOT x
	opAnd                      // x AND y AND ... (flattened, left to right)
	opOr                       // x OR y OR ...
	opEq                       // x = y
	opNe                       // x <> y
	opGt                       // x > y
	opGe                       // x >= y
	opLt                       // x < y
	opLe                       // x <= y
	opBetween                  // x BETWEEN lo AND hi
	opNotBetween               // x NOT BETWEEN lo AND hi
	opIn                       // property IN ('a', ...)
	opNotIn                    // property NOT IN ('a', ...)
	opIsNull                   // x IS NULL
	opIsNotNull                // x IS NOT NULL
)

var opSymbols = [...]string{
	opNeg: "-", opNot: "NOT", opAnd: "AND", opOr: "OR", opEq: "=", opNe: "<>", opGt: ">",
	opGe: ">=", opLt: "<", opLe: "<=", opBetween: "BETWEEN", opNotBetween: "NOT BETWEEN",
	opIn: "IN", opNotIn: "NOT IN", opIsNull: "IS NULL", opIsNotNull: "IS NOT NULL",
}

// inSetThreshold is the IN-list size from which membership uses a map instead of a scan.
const inSetThreshold = 8

// node is one operation of a compiled expression. Nodes are never modified after
// compilation, so a tree may be evaluated by many goroutines at once.
type node struct {
	op     opcode
	pos    int // byte offset of the node's first token, for error messages
	height int // 1 for leaves
	name   string
	val    value
	kids   []*node
	list   []string            // IN values, in source order
	set    map[string]struct{} // IN values when len(list) >= inSetThreshold
}

// isBoolean reports whether n yields TRUE, FALSE or NULL (RocketMQ's BooleanExpression:
// comparisons, logic, and the TRUE/FALSE/NULL constants).
func (n *node) isBoolean() bool {
	switch n.op {
	case opConst:
		return n.val.k == kBool || n.val.k == kNull
	case opProp, opNeg:
		return false
	}
	return true
}

// String renders the tree fully parenthesised; it shows how the expression was parsed.
func (n *node) String() string {
	var b strings.Builder
	n.format(&b)
	return b.String()
}

func (n *node) format(b *strings.Builder) {
	switch n.op {
	case opConst:
		b.WriteString(n.val.literal())
	case opProp:
		b.WriteString(n.name)
	case opBoolCast:
		n.kids[0].format(b)
	case opNeg, opNot:
		b.WriteString("(" + opSymbols[n.op] + " ")
		n.kids[0].format(b)
		b.WriteString(")")
	case opIsNull, opIsNotNull:
		b.WriteString("(")
		n.kids[0].format(b)
		b.WriteString(" " + opSymbols[n.op] + ")")
	case opBetween, opNotBetween:
		b.WriteString("(")
		n.kids[0].format(b)
		b.WriteString(" " + opSymbols[n.op] + " ")
		n.kids[1].format(b)
		b.WriteString(" AND ")
		n.kids[2].format(b)
		b.WriteString(")")
	case opIn, opNotIn:
		b.WriteString("(")
		n.kids[0].format(b)
		b.WriteString(" " + opSymbols[n.op] + " (")
		for i, s := range n.list {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quoteSQL(s))
		}
		b.WriteString("))")
	default: // binary and n-ary operators
		b.WriteString("(")
		for i, k := range n.kids {
			if i > 0 {
				b.WriteString(" " + opSymbols[n.op] + " ")
			}
			k.format(b)
		}
		b.WriteString(")")
	}
}

// parser is a recursive-descent parser for RocketMQ 4.9's SelectorParser.jj grammar:
//
//	or         := and (OR and)*
//	and        := equality (AND equality)*
//	equality   := comparison ('=' comparison | '<>' comparison | IS NULL | IS NOT NULL)*
//	comparison := unary ('>' unary | '>=' unary | '<' unary | '<=' unary
//	              | [NOT] BETWEEN unary AND unary | [NOT] IN '(' string (',' string)* ')')*
//	unary      := '+' unary | '-' unary | NOT unary | primary
//	primary    := literal | property | '(' or ')'
//
// Note that NOT is a unary operator binding tighter than comparisons, as in RocketMQ:
// "NOT a = 1" means "(NOT a) = 1"; write "NOT (a = 1)".
type parser struct {
	toks  []token
	i     int
	depth int // current nesting of parentheses and unary operators
}

func (p *parser) peek() token { return p.toks[p.i] }

// peek2 returns the token after the next one (tEOF at the end).
func (p *parser) peek2() token {
	if p.i+1 < len(p.toks) {
		return p.toks[p.i+1]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) expect(kind tokenKind, context string) (token, error) {
	t := p.next()
	if t.kind != kind {
		return t, syntaxErr(t.pos, fmt.Sprintf("expected %s %s, found %s", kind, context, t.describe()))
	}
	return t, nil
}

// parse parses a whole expression and checks that it yields a boolean.
func (p *parser) parse() (*node, error) {
	if p.peek().kind == tEOF {
		return nil, syntaxErr(p.peek().pos, "empty expression")
	}
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, syntaxErr(t.pos, fmt.Sprintf("unexpected %s after a complete expression", t.describe()))
	}
	return asBoolean(n, "the expression")
}

// enter counts one level of nesting at tok and refuses to go deeper than MaxSQLDepth, so
// hostile input cannot exhaust the stack.
func (p *parser) enter(tok token) error {
	p.depth++
	if p.depth > MaxSQLDepth {
		return syntaxErr(tok.pos, fmt.Sprintf("expression nested deeper than %d levels", MaxSQLDepth))
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) parseOr() (*node, error) {
	left, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tOr {
		op := p.next()
		right, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		if left, err = logic(opOr, op, left, right); err != nil {
			return nil, err
		}
	}
	return left, nil
}

func (p *parser) parseAnd() (*node, error) {
	left, err := p.parseEquality()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tAnd {
		op := p.next()
		right, err := p.parseEquality()
		if err != nil {
			return nil, err
		}
		if left, err = logic(opAnd, op, left, right); err != nil {
			return nil, err
		}
	}
	return left, nil
}

func (p *parser) parseEquality() (*node, error) {
	left, err := p.parseComparison()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		switch t.kind {
		case tEq, tNe:
			p.next()
			right, err := p.parseComparison()
			if err != nil {
				return nil, err
			}
			op := opEq
			if t.kind == tNe {
				op = opNe
			}
			if left, err = equality(op, t, left, right); err != nil {
				return nil, err
			}
		case tIs:
			p.next()
			op := opIsNull
			if p.peek().kind == tNot {
				p.next()
				op = opIsNotNull
			}
			if _, err := p.expect(tNull, "after IS"); err != nil {
				return nil, err
			}
			if left, err = mk(op, left.pos, t, left); err != nil {
				return nil, err
			}
		default:
			return left, nil
		}
	}
}

func (p *parser) parseComparison() (*node, error) {
	left, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		var op opcode
		switch t.kind {
		case tGt:
			op = opGt
		case tGe:
			op = opGe
		case tLt:
			op = opLt
		case tLe:
			op = opLe
		case tBetween:
			op = opBetween
		case tIn:
			op = opIn
		case tNot:
			// NOT here only as NOT BETWEEN / NOT IN (LOOKAHEAD(2) in the grammar); any other NOT
			// is left to the callers, which refuse it.
			switch p.peek2().kind {
			case tBetween:
				op = opNotBetween
			case tIn:
				op = opNotIn
			default:
				return left, nil
			}
			p.next()
		default:
			return left, nil
		}
		p.next()
		switch op {
		case opBetween, opNotBetween:
			left, err = p.parseBetween(op, t, left)
		case opIn, opNotIn:
			left, err = p.parseIn(op, t, left)
		default:
			var right *node
			if right, err = p.parseUnary(); err == nil {
				left, err = ordering(op, t, left, right)
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseBetween(op opcode, opTok token, value *node) (*node, error) {
	lo, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	if _, err := p.expect(tAnd, "between the bounds of "+opSymbols[op]); err != nil {
		return nil, err
	}
	hi, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	return between(op, opTok, value, lo, hi)
}

func (p *parser) parseIn(op opcode, opTok token, value *node) (*node, error) {
	if value.op != opProp {
		return nil, syntaxErr(value.pos, fmt.Sprintf("%s needs a property name on its left, found %s", opSymbols[op], value))
	}
	if _, err := p.expect(tLParen, "after "+opSymbols[op]); err != nil {
		return nil, err
	}
	var list []string
	for {
		t := p.next()
		if t.kind != tString {
			if t.kind == tRParen && len(list) == 0 {
				return nil, syntaxErr(t.pos, fmt.Sprintf("empty %s list: it needs at least one string literal", opSymbols[op]))
			}
			return nil, syntaxErr(t.pos, fmt.Sprintf("expected a string literal in the %s list, found %s", opSymbols[op], t.describe()))
		}
		if len(list) == MaxSQLInList {
			return nil, syntaxErr(t.pos, fmt.Sprintf("%s list longer than %d values", opSymbols[op], MaxSQLInList))
		}
		list = append(list, t.text)
		t = p.next()
		if t.kind == tRParen {
			break
		}
		if t.kind != tComma {
			return nil, syntaxErr(t.pos, fmt.Sprintf("expected ',' or ')' in the %s list, found %s", opSymbols[op], t.describe()))
		}
	}
	n, err := mk(op, value.pos, opTok, value)
	if err != nil {
		return nil, err
	}
	n.list = list
	if len(list) >= inSetThreshold {
		n.set = make(map[string]struct{}, len(list))
		for _, s := range list {
			n.set[s] = struct{}{}
		}
	}
	return n, nil
}

func (p *parser) parseUnary() (*node, error) {
	t := p.peek()
	switch t.kind {
	case tPlus, tMinus, tNot:
		p.next()
		if err := p.enter(t); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		switch t.kind {
		case tPlus:
			return x, nil // unary plus is a no-op in RocketMQ's grammar
		case tMinus:
			return negate(t, x)
		}
		if x, err = asBoolean(x, "the operand of NOT"); err != nil {
			return nil, err
		}
		return mk(opNot, t.pos, t, x)
	}
	return p.parsePrimary()
}

func (p *parser) parsePrimary() (*node, error) {
	t := p.next()
	switch t.kind {
	case tString:
		return &node{op: opConst, pos: t.pos, height: 1, val: value{k: kString, s: t.text}}, nil
	case tInt:
		text := strings.TrimRight(t.text, "lL")
		i, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, syntaxErr(t.pos, fmt.Sprintf("integer literal %s out of range [%d, %d]", t.text, int64(math.MinInt64), int64(math.MaxInt64)))
		}
		return &node{op: opConst, pos: t.pos, height: 1, val: value{k: kInt, i: i}}, nil
	case tFloat:
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, syntaxErr(t.pos, fmt.Sprintf("decimal literal %s out of range (larger than %g)", t.text, math.MaxFloat64))
		}
		return &node{op: opConst, pos: t.pos, height: 1, val: value{k: kFloat, f: f}}, nil
	case tTrue, tFalse:
		return &node{op: opConst, pos: t.pos, height: 1, val: value{k: kBool, b: t.kind == tTrue}}, nil
	case tNull:
		return &node{op: opConst, pos: t.pos, height: 1, val: value{k: kNull}}, nil
	case tIdent:
		return &node{op: opProp, pos: t.pos, height: 1, name: t.text}, nil
	case tLParen:
		if err := p.enter(t); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if _, err := p.expect(tRParen, "to close the '(' at byte "+strconv.Itoa(t.pos)); err != nil {
			return nil, err
		}
		return x, nil
	case tEOF:
		return nil, syntaxErr(t.pos, "unexpected end of expression: expected a value, property name or '('")
	}
	return nil, syntaxErr(t.pos, fmt.Sprintf("expected a value, property name or '(', found %s", t.describe()))
}

// mk builds a node of op over kids, refusing trees higher than MaxSQLDepth (long chains
// such as "a IS NULL IS NULL ..." would otherwise make evaluation recurse deeply).
func mk(op opcode, pos int, opTok token, kids ...*node) (*node, error) {
	h := 0
	for _, k := range kids {
		h = max(h, k.height)
	}
	if h+1 > MaxSQLDepth {
		return nil, syntaxErr(opTok.pos, fmt.Sprintf("expression nested deeper than %d levels", MaxSQLDepth))
	}
	return &node{op: op, pos: pos, height: h + 1, kids: kids}, nil
}

// asBoolean returns n if it yields a boolean, a boolean cast of n if n is a property (as
// RocketMQ's asBooleanExpression does), and an error otherwise.
func asBoolean(n *node, what string) (*node, error) {
	if n.isBoolean() {
		return n, nil
	}
	if n.op == opProp {
		return &node{op: opBoolCast, pos: n.pos, height: n.height + 1, kids: []*node{n}}, nil
	}
	return nil, syntaxErr(n.pos, fmt.Sprintf("%s must be a condition, but %s is not a boolean value", what, n))
}

// logic joins two operands with AND or OR, flattening chains of the same operator (which
// keeps evaluation order and result: both are evaluated left to right with short cuts).
func logic(op opcode, opTok token, left, right *node) (*node, error) {
	l, err := asBoolean(left, "the left operand of "+opSymbols[op])
	if err != nil {
		return nil, err
	}
	r, err := asBoolean(right, "the right operand of "+opSymbols[op])
	if err != nil {
		return nil, err
	}
	var kids []*node
	for _, k := range []*node{l, r} {
		if k.op == op {
			kids = append(kids, k.kids...)
		} else {
			kids = append(kids, k)
		}
	}
	return mk(op, l.pos, opTok, kids...)
}

// equality builds = or <>. As in RocketMQ's checkEqualOperand, NULL cannot be an operand
// (use IS NULL), and two constants must both be booleans or both not.
func equality(op opcode, opTok token, left, right *node) (*node, error) {
	for _, x := range []*node{left, right} {
		if x.op == opConst && x.val.k == kNull {
			return nil, syntaxErr(x.pos, fmt.Sprintf("NULL cannot be compared with '%s'; use IS NULL or IS NOT NULL", opSymbols[op]))
		}
	}
	if left.op == opConst && right.op == opConst && (left.val.k == kBool) != (right.val.k == kBool) {
		return nil, syntaxErr(opTok.pos, fmt.Sprintf("%s cannot be compared with %s", left.val.literal(), right.val.literal()))
	}
	return mk(op, left.pos, opTok, left, right)
}

// checkOrderingOperand refuses, as RocketMQ's checkLessThanOperand does, operands of
// > >= < <= (and BETWEEN) that can never be numbers: string, boolean and NULL constants and
// conditions.
func checkOrderingOperand(op opcode, x *node) error {
	if x.op == opConst {
		if x.val.k == kInt || x.val.k == kFloat {
			return nil
		}
		return syntaxErr(x.pos, fmt.Sprintf("'%s' needs numbers, but %s is not a number", opSymbols[op], x.val.literal()))
	}
	if x.isBoolean() {
		return syntaxErr(x.pos, fmt.Sprintf("'%s' needs numbers, but %s is a condition", opSymbols[op], x))
	}
	return nil
}

func ordering(op opcode, opTok token, left, right *node) (*node, error) {
	if err := checkOrderingOperand(op, left); err != nil {
		return nil, err
	}
	if err := checkOrderingOperand(op, right); err != nil {
		return nil, err
	}
	return mk(op, left.pos, opTok, left, right)
}

// between builds [NOT] BETWEEN. Like RocketMQ's createBetween, BETWEEN with two constant
// bounds refuses NULL bounds and a lower bound greater than the upper one; NOT BETWEEN
// does not check its bounds' order.
func between(op opcode, opTok token, value, lo, hi *node) (*node, error) {
	if lo.op == opConst && hi.op == opConst && op == opBetween {
		if lo.val.k == kNull || hi.val.k == kNull {
			return nil, syntaxErr(opTok.pos, "the bounds of BETWEEN cannot be NULL")
		}
	}
	for _, x := range []*node{value, lo, hi} {
		if err := checkOrderingOperand(op, x); err != nil {
			return nil, err
		}
	}
	if lo.op == opConst && hi.op == opConst && op == opBetween {
		if c, err := compareValues(lo.val, hi.val); err == nil && c > 0 {
			return nil, syntaxErr(lo.pos, fmt.Sprintf("BETWEEN lower bound %s is greater than upper bound %s", lo.val.literal(), hi.val.literal()))
		}
	}
	return mk(op, value.pos, opTok, value, lo, hi)
}

// negate folds "-" into numeric constants; on anything else it builds a node that, like
// RocketMQ's createNegate, yields NULL for non-numbers (properties are strings, so "-a" is
// always NULL).
func negate(opTok token, x *node) (*node, error) {
	if x.op == opConst {
		switch x.val.k {
		case kInt:
			return &node{op: opConst, pos: opTok.pos, height: 1, val: value{k: kInt, i: -x.val.i}}, nil
		case kFloat:
			return &node{op: opConst, pos: opTok.pos, height: 1, val: value{k: kFloat, f: -x.val.f}}, nil
		}
	}
	return mk(opNeg, opTok.pos, opTok, x)
}
