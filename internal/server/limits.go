package server

import (
	"context"
	"strconv"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/jsonkeys"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/ratelimit"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Limits of the graph. Every request is bounded before gqlgen validates it,
// because validation (overlapping fields) is quadratic in the fields of a
// selection set and fragment spreads multiply: a 64 KB document of repeated
// fields or 22 levels of doubling fragments used to take seconds to minutes.
const (
	// MaxTokens bounds parsing: no legitimate dashboard query comes near it
	// (graphql-js's introspection query is about 300 tokens).
	MaxTokens = 15000
	// MaxFields bounds the fields of an operation with every fragment spread
	// expanded (counted once per spread, each fragment walked once).
	MaxFields = 3000
	// MaxSameName bounds the fields of one selection set that answer under
	// the same response name (validation compares those pairwise).
	MaxSameName = 64
	// MaxDepth bounds the nesting of data fields.
	MaxDepth = 12
	// MaxIntrospectionDepth is introspection's own bound: the standard
	// introspection query (GraphiQL, Apollo, codegen) nests type references
	// about 15 levels deep, on a finite schema.
	MaxIntrospectionDepth = 24
	// MaxIntrospectionRoots bounds __schema and __type fields per operation,
	// whose answers are large (a __schema is also priced SchemaCost). Apollo
	// Kotlin's first introspection query asks for five __type fields.
	MaxIntrospectionRoots = 8
	// MaxComplexity admits the fleet dashboard query (50 pools of 40 nodes
	// with their latest inventory, about 25000) with headroom.
	MaxComplexity = 50000
	// MaxSubscriptionComplexity bounds a subscription: it is charged once,
	// when it starts, and its selection runs again for every event it
	// delivers (a dashboard's selects the event and its resource, tens).
	MaxSubscriptionComplexity = 2000
	// CostPerRequest is how much of an operation's cost one unit of the
	// request budget pays for: a query or subscription spends one unit per
	// CostPerRequest of its cost, at least one (a dashboard's page of pools
	// one, the fleet query 25, the largest admitted 50), so that the budget
	// bounds the work a credential asks for, not only its requests.
	CostPerRequest = 1000
	// SchemaCost is the price of a __schema field (the standard
	// introspection query's answer was about 180 KB and 20 ms of CPU here,
	// a fifth of the fleet query's work; 250 KB since the mutations are
	// described from the registry): 5 units of the budget.
	SchemaCost = 5000
	// MaxConnections bounds the connection fields an operation selects
	// (each occurrence, fragments spread as often as they are): the loaders
	// read a connection in one statement per level for all its parents,
	// but one per distinct (first, after), so 1000 aliases of a cheap
	// connection with 1000 cursors were 1000 statements for one request
	// (and one unit of its rate). A dashboard selects a handful.
	MaxConnections = 100
	// StreamCountCost is the price of a totalCount over a stream that grows
	// with time, not with the fleet (StreamCounts): the count reads every
	// retained record of the filter, a tenant's audit trail of 400 days or
	// its events, each time it is asked for (a node's trail grows with its
	// inventory reports). Half a request: an operation holds fewer than
	// MaxComplexity / StreamCountCost of them (100 aliases of
	// Tenant.events' count took 6.6 s on 500,000 events at 1 unit each),
	// two of them spend a unit of the rate, and a dashboard can still show
	// the count of each of 50 instances' audit records.
	StreamCountCost = CostPerRequest / 2
)

// StreamCounts are the connections whose totalCount is StreamCountCost.
var StreamCounts = map[string]bool{"AuditRecordConnection": true, "TenantEventConnection": true}

// refusal is an INVALID_INPUT refusal of a whole operation, with
// details.reason naming the bound and the figures a client needs.
func refusal(reason, msg string, details map[string]any) *gqlerror.Error {
	e := gqlerror.Errorf("%s", msg)
	d := map[string]any{"reason": reason}
	for k, v := range details {
		d[k] = v
	}
	e.Extensions = map[string]any{"code": string(errs.InvalidInput), "details": d}
	return e
}

// bounds refuses documents that would be expensive to validate, before
// gqlgen parses and validates them. Documents that passed are remembered,
// so a dashboard's repeated query is checked once.
type bounds struct {
	passed *lru.Cache[string, struct{}]
}

func newBounds() *bounds {
	c, _ := lru.New[string, struct{}](1000)
	return &bounds{passed: c}
}

// newBoundsUncached checks every document (benchmarks).
func newBoundsUncached() *bounds {
	c, _ := lru.New[string, struct{}](1)
	return &bounds{passed: c}
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationParameterMutator
} = (*bounds)(nil)

func (*bounds) ExtensionName() string                   { return "Bounds" }
func (*bounds) Validate(graphql.ExecutableSchema) error { return nil }

func (b *bounds) MutateOperationParameters(ctx context.Context, params *graphql.RawParams) *gqlerror.Error {
	if _, ok := b.passed.Get(params.Query); ok {
		return nil
	}
	if err := checkDocument(params.Query); err != nil {
		return err
	}
	b.passed.Add(params.Query, struct{}{})
	return nil
}

// outOfRangeNumber refuses the first number literal of the document that
// no 64-bit integer or float holds (99999999999999999999, 1e400), wherever
// it is written: an argument, a directive's, a variable's default, inside
// a list or an input object. gqlparser reads every literal into an int64
// or a float64: one that did not fit panicked in a scalar it does not
// validate (Time: 500 INTERNAL), and inside a list or an input object gave
// two or three errors, the last quoting the whole object back. It is one
// validation error, at the literal.
func outOfRangeNumber(doc *ast.QueryDocument) *gqlerror.Error {
	var bad *ast.Value
	var value func(v *ast.Value)
	value = func(v *ast.Value) {
		if v == nil || bad != nil {
			return
		}
		switch v.Kind {
		case ast.IntValue, ast.FloatValue:
			if _, err := v.Value(nil); err != nil {
				bad = v
			}
		case ast.ListValue, ast.ObjectValue:
			for _, c := range v.Children {
				value(c.Value)
			}
		}
	}
	directives := func(ds ast.DirectiveList) {
		for _, d := range ds {
			for _, a := range d.Arguments {
				value(a.Value)
			}
		}
	}
	var set func(sel ast.SelectionSet)
	set = func(sel ast.SelectionSet) {
		for _, s := range sel {
			switch s := s.(type) {
			case *ast.Field:
				for _, a := range s.Arguments {
					value(a.Value)
				}
				directives(s.Directives)
				set(s.SelectionSet)
			case *ast.InlineFragment:
				directives(s.Directives)
				set(s.SelectionSet)
			case *ast.FragmentSpread:
				directives(s.Directives)
			}
		}
	}
	for _, op := range doc.Operations {
		for _, d := range op.VariableDefinitions {
			value(d.DefaultValue)
			directives(d.Directives)
		}
		directives(op.Directives)
		set(op.SelectionSet)
	}
	for _, f := range doc.Fragments {
		directives(f.Directives)
		set(f.SelectionSet)
	}
	if bad == nil {
		return nil
	}
	return gqlerror.ErrorPosf(bad.Position, "the number %s is out of range: no 64-bit integer or float holds it", errs.Cut(bad.Raw))
}

// checkDocument parses q with a token limit and walks it once per fragment:
// expanded field count, same-name fields per selection set, depth of data
// fields and of introspection.
func checkDocument(q string) *gqlerror.Error {
	if loneSurrogateLiteral(q) {
		// gqlparser reads it as U+FFFD, a character the client did not
		// send, and stored it; the spec makes it a syntax error, and the
		// same string in a variable is refused (DecodeParams).
		ge := gqlerror.Errorf("a string in the document escapes a UTF-16 surrogate without its pair (one of \\ud800-\\udfff alone): not a Unicode character")
		errcode.Set(ge, errcode.ParseFailed)
		return ge
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: q}, MaxTokens)
	if err != nil {
		if ge, ok := err.(*gqlerror.Error); ok {
			if strings.Contains(ge.Message, "token limit") {
				return refusal("tokens", ge.Message, map[string]any{"limit": MaxTokens})
			}
			errcode.Set(ge, errcode.ParseFailed)
			return ge
		}
		return gqlerror.Errorf("the document does not parse")
	}
	if err := outOfRangeNumber(doc); err != nil {
		return err
	}
	w := &docWalker{frags: map[string]*ast.FragmentDefinition{}, memo: map[string]*shape{}}
	for _, f := range doc.Fragments {
		w.frags[f.Name] = f
	}
	total := 0 // fields of every operation, fragments expanded
	for _, op := range doc.Operations {
		s := w.set(op.SelectionSet, false)
		if w.err != nil {
			return w.err
		}
		if s.fields > MaxFields {
			return refusal("fields", "the operation selects "+itoa(s.fields)+" fields with its fragments expanded, more than the limit of "+itoa(MaxFields),
				map[string]any{"fields": s.fields, "limit": MaxFields})
		}
		// Validation walks every operation of the document, and each
		// fragment again for each operation that spreads it: 1156 short
		// operations spreading one fragment of 2497 fields took 13.8 s
		// (a helper's probe). The bound is the document's.
		if total = addSat(total, s.fields); total > MaxFields {
			return refusal("fields", "the document's operations select "+itoa(total)+" fields with their fragments expanded, more than the limit of "+itoa(MaxFields),
				map[string]any{"fields": total, "limit": MaxFields})
		}
		if s.depth > MaxDepth {
			return refusal("depth", "operation is nested "+itoa(s.depth)+" levels deep, more than the limit of "+itoa(MaxDepth),
				map[string]any{"depth": s.depth, "limit": MaxDepth})
		}
		if s.introDepth > MaxIntrospectionDepth {
			return refusal("depth", "introspection is nested "+itoa(s.introDepth)+" levels deep, more than the limit of "+itoa(MaxIntrospectionDepth),
				map[string]any{"depth": s.introDepth, "limit": MaxIntrospectionDepth})
		}
		if s.introRoots > MaxIntrospectionRoots {
			return refusal("introspection", "the operation asks for __schema or __type "+itoa(s.introRoots)+" times, more than the limit of "+itoa(MaxIntrospectionRoots),
				map[string]any{"count": s.introRoots, "limit": MaxIntrospectionRoots})
		}
		if e := w.samePaths(op.SelectionSet); e != nil {
			return e
		}
	}
	return nil
}

// responseName is the name a field answers under: its alias, or its name.
func responseName(f *ast.Field) string {
	if f.Alias != "" {
		return f.Alias
	}
	return f.Name
}

// samePaths counts the fields answering at each response path of an
// operation, every fragment expanded: validation merges the fields of one
// response name in a selection set, and their selections with them, and
// compares them pairwise, so 46 aliases t: tenant(…) each selecting 64
// tenantId were 2944 fields of one name (0.45 s), though no selection set
// held more than 64. Past MaxSameName at one path the document is
// refused. It runs once the operation's expanded fields are within
// MaxFields (and its fragments spread no cycle), so it visits at most
// that many fields.
func (w *docWalker) samePaths(sel ast.SelectionSet) *gqlerror.Error {
	counts := map[string]int{}
	var err *gqlerror.Error
	var walk func(prefix string, sel ast.SelectionSet, depth int)
	walk = func(prefix string, sel ast.SelectionSet, depth int) {
		for _, s := range sel {
			if err != nil {
				return
			}
			switch s := s.(type) {
			case *ast.Field:
				name := responseName(s)
				path := name
				if prefix != "" {
					path = prefix + "." + name
				}
				if counts[path]++; counts[path] > MaxSameName {
					err = refusal("fields", "the operation answers "+itoa(counts[path])+" fields at "+quote(path)+" (fields of one name merge, with their selections), more than the limit of "+itoa(MaxSameName),
						map[string]any{"name": name, "path": path, "limit": MaxSameName})
					return
				}
				walk(path, s.SelectionSet, depth)
			case *ast.InlineFragment:
				walk(prefix, s.SelectionSet, depth)
			case *ast.FragmentSpread:
				if def := w.frags[s.Name]; def != nil && depth < 100 {
					walk(prefix, def.SelectionSet, depth+1)
				}
			}
		}
	}
	walk("", sel, 0)
	return err
}

// loneSurrogateLiteral reports whether a string literal of a GraphQL
// document (not a block string, whose backslashes are text, nor a
// comment) escapes a UTF-16 surrogate that is not half of a pair.
func loneSurrogateLiteral(q string) bool {
	if !strings.Contains(q, `\u`) {
		return false
	}
	for i := 0; i < len(q); i++ {
		switch {
		case q[i] == '#': // a comment, to the end of its line
			for i < len(q) && q[i] != '\n' && q[i] != '\r' {
				i++
			}
		case strings.HasPrefix(q[i:], `"""`): // a block string: escapes are text
			i += 3
			for i < len(q) && !strings.HasPrefix(q[i:], `"""`) {
				if strings.HasPrefix(q[i:], `\"""`) {
					i += 3
				}
				i++
			}
			i += 2
		case q[i] == '"':
			j := i + 1
			for j < len(q) && q[j] != '"' && q[j] != '\n' && q[j] != '\r' {
				if q[j] == '\\' {
					j++ // the escaped character, or the u of \uXXXX (read below)
				}
				j++
			}
			if jsonkeys.LoneSurrogate([]byte(q[i:min(j+1, len(q))])) {
				return true
			}
			i = j
		}
	}
	return false
}

// shape is what the walk learns of a selection set.
type shape struct {
	fields     int // fields, fragments expanded (saturating)
	depth      int // deepest data field
	introDepth int // deepest field under __schema/__type
	introRoots int // __schema and __type fields
	// names counts the set's fields by response name, its inline
	// fragments and fragment spreads merged in (as validation merges
	// them): a spread adds its fragment's counts to the set it is in.
	names map[string]int
}

type docWalker struct {
	frags map[string]*ast.FragmentDefinition
	memo  map[string]*shape // fragment name -> its shape (nil while walking: a cycle)
	err   *gqlerror.Error
}

const saturate = 1 << 30

func addSat(a, b int) int {
	if a+b > saturate {
		return saturate
	}
	return a + b
}

// set walks a selection set; intro says it is under an introspection root.
func (w *docWalker) set(sel ast.SelectionSet, intro bool) shape {
	var out shape
	if intro {
		if n := w.introRepeat(sel, map[string]string{}, map[string]bool{}); n != "" {
			w.err = refusal("introspection", "the introspection answers "+quote(n)+" under two names in one selection set: each name repeats that part of the schema",
				map[string]any{"field": n})
			return out
		}
	}
	names := map[string]int{}
	out.names = names
	// count adds n fields answering under name to the set; past
	// MaxSameName the document is refused (validation compares them
	// pairwise: 46 fragments of 64 "name" fields spread in one set took
	// 0.45 s, counted per fragment body).
	count := func(name string, n int) bool {
		names[name] = addSat(names[name], n)
		if names[name] > MaxSameName {
			w.err = refusal("fields", "the selection answers "+itoa(names[name])+" times under the name "+quote(name)+", more than the limit of "+itoa(MaxSameName),
				map[string]any{"name": name, "limit": MaxSameName})
			return false
		}
		return true
	}
	var walk func(sel ast.SelectionSet)
	merge := func(s shape) {
		out.fields = addSat(out.fields, s.fields)
		out.introRoots = addSat(out.introRoots, s.introRoots)
		out.depth = max(out.depth, s.depth)
		out.introDepth = max(out.introDepth, s.introDepth)
	}
	walk = func(sel ast.SelectionSet) {
		for _, s := range sel {
			if w.err != nil {
				return
			}
			switch s := s.(type) {
			case *ast.Field:
				name := responseName(s)
				if !count(name, 1) {
					return
				}
				isIntro := s.Name == "__schema" || s.Name == "__type"
				child := w.set(s.SelectionSet, intro || isIntro)
				var f shape
				f.fields = addSat(1, child.fields)
				f.introRoots = child.introRoots
				switch {
				case isIntro && !intro:
					f.introRoots = addSat(f.introRoots, 1)
					f.introDepth = 1 + child.introDepth
				case intro:
					f.introDepth = 1 + child.introDepth
				default:
					f.depth = 1 + child.depth
					f.introDepth = child.introDepth
				}
				merge(f)
			case *ast.InlineFragment:
				walk(s.SelectionSet)
			case *ast.FragmentSpread:
				f, ok := w.fragment(s.Name, intro)
				if ok {
					// The fragment's fields merge into this set: its
					// counts of each name too.
					for name, n := range f.names {
						if !count(name, n) {
							return
						}
					}
					merge(f)
				}
			}
		}
	}
	walk(sel)
	return out
}

// introRepeat finds, in a selection set under introspection (fragments
// expanded), a field answered under two response names: 990 aliases of
// types under one __schema answered 12 MB for the price of one schema.
// Introspection has no need of aliases of one field (the standard query
// has none); __typename is cheap and exempt.
func (w *docWalker) introRepeat(sel ast.SelectionSet, seen map[string]string, expanded map[string]bool) string {
	for _, s := range sel {
		switch s := s.(type) {
		case *ast.Field:
			if s.Name == "__typename" {
				continue
			}
			resp := responseName(s)
			if prev, ok := seen[s.Name]; ok && prev != resp {
				return s.Name
			}
			seen[s.Name] = resp
		case *ast.InlineFragment:
			if n := w.introRepeat(s.SelectionSet, seen, expanded); n != "" {
				return n
			}
		case *ast.FragmentSpread:
			if def := w.frags[s.Name]; def != nil && !expanded[s.Name] {
				expanded[s.Name] = true // its fields are in seen already
				if n := w.introRepeat(def.SelectionSet, seen, expanded); n != "" {
					return n
				}
			}
		}
	}
	return ""
}

// fragment returns a fragment's shape, walking it once. Fragments spread
// under introspection are walked apart (their depth counts differently).
func (w *docWalker) fragment(name string, intro bool) (shape, bool) {
	key := name
	if intro {
		key = "\x00" + name
	}
	if s, seen := w.memo[key]; seen {
		if s == nil {
			w.err = gqlerror.Errorf("fragment %s spreads itself", name)
			errcode.Set(w.err, errcode.ValidationFailed)
			return shape{}, false
		}
		return *s, true
	}
	def := w.frags[name]
	if def == nil {
		return shape{}, false // validation reports unknown fragments
	}
	w.memo[key] = nil
	s := w.set(def.SelectionSet, intro)
	w.memo[key] = &s
	return s, true
}

// --- complexity -------------------------------------------------------------

// cost computes an operation's cost by one rule: a field costs 1 plus its
// children; a field returning a connection (a type named ...Connection)
// costs 1 plus its page size (first, default 50) times its children. No
// connection can be added without a cost. Each fragment is costed once.
type cost struct {
	es graphql.ExecutableSchema
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = (*cost)(nil)

func (*cost) ExtensionName() string { return "Cost" }
func (c *cost) Validate(es graphql.ExecutableSchema) error {
	c.es = es
	return nil
}

func (c *cost) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	n, conns := operationCost(c.es.Schema(), oc.Operation, oc.Variables)
	oc.Stats.SetExtension(costKey, n) // what charge spends
	if n > MaxComplexity {
		return refusal("complexity", "operation has complexity "+itoa(n)+", which exceeds the limit of "+itoa(MaxComplexity),
			map[string]any{"cost": n, "limit": MaxComplexity})
	}
	if oc.Operation.Operation == ast.Subscription && n > MaxSubscriptionComplexity {
		return refusal("complexity", "a subscription's selection runs for every event; this one has complexity "+itoa(n)+
			", which exceeds the limit of "+itoa(MaxSubscriptionComplexity)+" for subscriptions", map[string]any{"cost": n, "limit": MaxSubscriptionComplexity})
	}
	if conns > MaxConnections {
		return refusal("connections", "operation selects "+itoa(conns)+" connections, more than the limit of "+itoa(MaxConnections),
			map[string]any{"count": conns, "limit": MaxConnections})
	}
	return nil
}

// OperationCost is the cost of a validated operation.
func OperationCost(schema *ast.Schema, op *ast.OperationDefinition, vars map[string]any) int {
	n, _ := operationCost(schema, op, vars)
	return n
}

// operationCost is the cost of a validated operation and the number of
// connection fields it selects.
func operationCost(schema *ast.Schema, op *ast.OperationDefinition, vars map[string]any) (cost, conns int) {
	cw := &costWalker{schema: schema, vars: vars, memo: map[string][2]int{}, split: map[string][3]int{}}
	return cw.set(op.SelectionSet)
}

// IsConnection says whether a field returns a connection.
func IsConnection(f *ast.FieldDefinition) bool {
	return f != nil && f.Type != nil && f.Type.Elem == nil && strings.HasSuffix(f.Type.NamedType, "Connection")
}

type costWalker struct {
	schema *ast.Schema
	vars   map[string]any
	memo   map[string][2]int // a fragment's cost and connections
	split  map[string][3]int // a fragment's parts of a connection (connection)
}

func (cw *costWalker) set(sel ast.SelectionSet) (total, conns int) {
	for _, s := range sel {
		if cw.skipped(s) {
			continue
		}
		switch s := s.(type) {
		case *ast.Field:
			if s.Name == "__schema" {
				// The whole schema (about 180 KB for the standard
				// introspection query): a fixed price, its nesting bounded
				// by its own rule.
				total = addSat(total, SchemaCost)
				continue
			}
			if IsConnection(s.Definition) {
				// What is read per item (edges, nodes) is paid per item, at
				// least 1 (the page is loaded whatever is selected);
				// totalCount and pageInfo once.
				each, once, cc := cw.connection(s.SelectionSet)
				conns = addSat(addSat(conns, cc), 1)
				total = addSat(total, addSat(addSat(1, once), mulSat(pageSize(s.ArgumentMap(cw.vars), s.Definition), max(each, 1))))
				continue
			}
			child, cc := cw.set(s.SelectionSet)
			conns = addSat(conns, cc)
			total = addSat(total, addSat(1, child))
		case *ast.InlineFragment:
			c, cc := cw.set(s.SelectionSet)
			total, conns = addSat(total, c), addSat(conns, cc)
		case *ast.FragmentSpread:
			m, ok := cw.memo[s.Name]
			if !ok && s.Definition != nil {
				cw.memo[s.Name] = [2]int{} // validation refused cycles already
				c, cc := cw.set(s.Definition.SelectionSet)
				m = [2]int{c, cc}
				cw.memo[s.Name] = m
			}
			total, conns = addSat(total, m[0]), addSat(conns, m[1])
		}
	}
	return total, conns
}

// connection splits a connection's selection into what is read per item
// (its edges and nodes fields) and what once (totalCount, pageInfo), through
// its fragments (the bounds cap the fields with fragments expanded).
func (cw *costWalker) connection(sel ast.SelectionSet) (each, once, conns int) {
	for _, s := range sel {
		if cw.skipped(s) {
			continue
		}
		var e, o, cc int
		switch s := s.(type) {
		case *ast.Field:
			c, fc := cw.set(ast.SelectionSet{s})
			cc = fc
			switch {
			case s.Name == "edges" || s.Name == "nodes":
				e = c
			case s.Name == "totalCount" && s.ObjectDefinition != nil && StreamCounts[s.ObjectDefinition.Name]:
				o = StreamCountCost
			default:
				o = c
			}
		case *ast.InlineFragment:
			e, o, cc = cw.connection(s.SelectionSet)
		case *ast.FragmentSpread:
			m, ok := cw.split[s.Name]
			if !ok && s.Definition != nil {
				cw.split[s.Name] = [3]int{} // validation refused cycles already
				e, o, cc := cw.connection(s.Definition.SelectionSet)
				m = [3]int{e, o, cc}
				cw.split[s.Name] = m
			}
			e, o, cc = m[0], m[1], m[2]
		}
		each, once, conns = addSat(each, e), addSat(once, o), addSat(conns, cc)
	}
	return each, once, conns
}

// skipped says a selection will not run: @skip(if: true) or
// @include(if: false), literally or through a variable.
func (cw *costWalker) skipped(s ast.Selection) bool {
	for _, d := range directivesOf(s) {
		if d.Name != "skip" && d.Name != "include" {
			continue
		}
		if v, ok := d.ArgumentMap(cw.vars)["if"].(bool); ok && v == (d.Name == "skip") {
			return true
		}
	}
	return false
}

// directivesOf is a selection's directives.
func directivesOf(s ast.Selection) ast.DirectiveList {
	switch s := s.(type) {
	case *ast.Field:
		return s.Directives
	case *ast.InlineFragment:
		return s.Directives
	case *ast.FragmentSpread:
		return s.Directives
	}
	return nil
}

// pageSize is a connection's requested page size, as its resolver will see
// it (an out-of-range first is refused by the resolver; count the bound).
func pageSize(args map[string]any, def *ast.FieldDefinition) int {
	v, ok := args["first"]
	if !ok || v == nil {
		return relay.DefaultFirst(def) // null reads the stated default, as the resolver does
	}
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	default:
		return page.MaxLimit
	}
	if n < 1 {
		return 1
	}
	if n > page.MaxLimit {
		return page.MaxLimit
	}
	return int(n)
}

func mulSat(a, b int) int {
	if a != 0 && b > saturate/a {
		return saturate
	}
	return a * b
}

// --- small helpers ----------------------------------------------------------

func itoa(n int) string { return strconv.Itoa(n) }

func quote(s string) string { return strconv.Quote(s) }

// --- the request budget -----------------------------------------------------

// costKey is where cost leaves an operation's cost for charge.
const costKey = "Cost"

// The request budget is spent in two steps. admit spends one unit for every
// document before it is parsed, so that documents refused by the bounds,
// the parser, validation or the cost are not free (a credential over its
// budget sent 700 invalid documents a second, each parsed and validated);
// charge then spends the rest of the operation's cost: one unit per
// CostPerRequest of it (at least one in all; never more than the burst, so
// that every admitted operation can pass with a full budget), and for a
// mutation at least one per root field (300 aliased mutations in one
// request are 300 calls). Every transport's operations pass both, sockets
// included.
type admit struct{ s *Server }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationParameterMutator
} = (*admit)(nil)

func (*admit) ExtensionName() string                   { return "Admit" }
func (*admit) Validate(graphql.ExecutableSchema) error { return nil }

func (a *admit) MutateOperationParameters(ctx context.Context, _ *graphql.RawParams) *gqlerror.Error {
	if reqctx.Admitted(ctx) {
		return nil // an HTTP request paid before its body was read
	}
	return spend(ctx, a.s.limiter, 1, 0)
}

type charge struct{ s *Server }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = (*charge)(nil)

func (*charge) ExtensionName() string                   { return "Charge" }
func (*charge) Validate(graphql.ExecutableSchema) error { return nil }

func (c *charge) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	l := c.s.limiter
	if l == nil || oc.Operation == nil {
		return nil
	}
	if oc.Operation.Operation == ast.Mutation {
		if m := rootFields(oc.Operation.SelectionSet); m > l.Burst() {
			return refusal("batch", "the operation holds "+itoa(m)+" mutations, more than the limit of "+itoa(l.Burst())+" per request",
				map[string]any{"count": m, "limit": l.Burst()})
		}
	}
	cost, _ := oc.Stats.GetExtension(costKey).(int)
	n := charged(oc.Operation, cost, l.Burst())
	return spend(ctx, l, n-1, n) // the first unit is paid (admit)
}

// spend takes n units of the caller's budget (nothing for n = 0 or without
// a limit or a principal); over it, the RATE_LIMITED refusal. charge is the
// operation's whole charge when known (0 before its document is read): the
// wait it states is the one after which the whole charge passes, its first
// unit included (a retry pays it again), and details.charge says it.
func spend(ctx context.Context, l *ratelimit.Limiter, n, charge int) *gqlerror.Error {
	p := reqctx.PrincipalFrom(ctx)
	if l == nil || p == nil || n <= 0 {
		return nil
	}
	ok, d, err := l.Allow(ctx, p.TokenID, n)
	if err != nil {
		// The deadline passed while the lease was in flight: not a refusal.
		e := store.ClassifyIn(ctx, err)
		ge := gqlerror.Errorf("%s", e.Message)
		ge.Extensions = map[string]any{"code": string(e.Code), "details": e.Details}
		return ge
	}
	if ok {
		return nil
	}
	details := map[string]any{}
	if charge > n {
		d += l.Wait(charge - n)
		details["charge"] = charge
	}
	secs := int(d.Seconds()) + 1
	details["retryAfterSeconds"] = secs
	e := gqlerror.Errorf("over the request budget; retry in %d s", secs)
	e.Extensions = map[string]any{"code": string(errs.RateLimited), "details": details}
	return e
}

// charged is what an operation of that cost spends of a budget whose burst
// is burst: one unit per CostPerRequest of its cost, rounded up, at least
// one and at least one per root field of a mutation, at most the burst.
func charged(op *ast.OperationDefinition, cost, burst int) int {
	n := max(1, (cost+CostPerRequest-1)/CostPerRequest)
	if op.Operation == ast.Mutation {
		n = max(n, rootFields(op.SelectionSet))
	}
	return min(n, burst)
}

// rootFields counts the fields of a selection set, fragments included.
func rootFields(sel ast.SelectionSet) int {
	n := 0
	for _, s := range sel {
		switch s := s.(type) {
		case *ast.Field:
			n++
		case *ast.InlineFragment:
			n += rootFields(s.SelectionSet)
		case *ast.FragmentSpread:
			if s.Definition != nil {
				n += rootFields(s.Definition.SelectionSet)
			}
		}
	}
	return n
}
