package server

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// validationPath names what the validator refused, as details.path names
// a refused variable or field, where the validator gives only a message
// and a line and column: an argument literal ("Int cannot represent
// non-integer value: 1.5" at first: 1.5 → "first"), the fields and
// indexes inside it ("size.gpus", "types[1]"), a field an input object
// lacks or does not have ("tenantId", "size.extra"), an argument a field
// lacks or does not take ("tenantId", "bogus"), a directive's argument
// ("if"), a variable's default ("variable.f"). A mutation's input argument
// is the method's input, so its fields are named without it, as the
// method's own refusals name them. "" when nothing is named there.
//
// Only a refused document is parsed again (the validator returns none
// with its errors), once per request (the memo in ctx, withLiterals: a
// document of a thousand bad literals is a thousand errors); a context
// without a memo names no path.
func validationPath(ctx context.Context, query, msg string, line, column int) string {
	if m := argumentNamed.FindStringSubmatch(msg); m != nil {
		return m[1] + m[2]
	}
	p := literalPath(ctx, query, line, column)
	if p == "" {
		return ""
	}
	if m := fieldNotProvided.FindStringSubmatch(msg); m != nil {
		p += "." + m[1]
	}
	return strings.TrimPrefix(p, "input.") // the method's input: its fields as the method names them
}

var (
	// the validator's words naming an argument a field or directive lacks
	// or does not take (located at the field, not the argument)
	argumentNamed = regexp.MustCompile(`^(?:Unknown argument "([^"]+)" on (?:field|directive) |(?:Field|Directive) "[^"]+" argument "([^"]+)" of type "[^"]+" is required, but it was not provided\.$)`)
	// an input object lacking a required field (located at the object)
	fieldNotProvided = regexp.MustCompile(`^Field "[^"]*\.([^".]+)" of required type "[^"]+" was not provided\.$`)
)

// literalPath names the value, or the input object field, of the document
// at line:column ("input.size.gpus", "variable.f"), or "".
func literalPath(ctx context.Context, query string, line, column int) string {
	m, _ := ctx.Value(literalsKey{}).(*literals)
	if m == nil {
		return ""
	}
	doc := m.parse(query)
	if doc == nil {
		return ""
	}
	var found string
	args := func(list ast.ArgumentList) bool {
		for _, a := range list {
			if p, ok := inValue(a.Value, a.Name, line, column); ok {
				found = p
				return true
			}
		}
		return false
	}
	directives := func(list ast.DirectiveList) bool {
		for _, d := range list {
			if args(d.Arguments) {
				return true
			}
		}
		return false
	}
	var inSet func(ast.SelectionSet) bool
	inSet = func(set ast.SelectionSet) bool {
		for _, sel := range set {
			switch s := sel.(type) {
			case *ast.Field:
				if args(s.Arguments) || directives(s.Directives) || inSet(s.SelectionSet) {
					return true
				}
			case *ast.InlineFragment:
				if directives(s.Directives) || inSet(s.SelectionSet) {
					return true
				}
			case *ast.FragmentSpread:
				if directives(s.Directives) {
					return true
				}
			}
		}
		return false
	}
	for _, op := range doc.Operations {
		for _, v := range op.VariableDefinitions {
			if p, ok := inValue(v.DefaultValue, "variable."+v.Variable, line, column); ok {
				return p
			}
		}
		if directives(op.Directives) || inSet(op.SelectionSet) {
			return found
		}
	}
	for _, f := range doc.Fragments {
		if directives(f.Directives) || inSet(f.SelectionSet) {
			return found
		}
	}
	return ""
}

// inValue finds the value, or an input object's field, at line:column in
// v, named path, and returns its path. Depth is the document's, bounded by
// the parser's token limit.
func inValue(v *ast.Value, path string, line, column int) (string, bool) {
	if v == nil {
		return "", false
	}
	if at(v.Position, line, column) {
		return path, true
	}
	for i, c := range v.Children {
		p := path + "[" + strconv.Itoa(i) + "]"
		if v.Kind == ast.ObjectValue {
			p = path + "." + c.Name
			if at(c.Position, line, column) {
				return p, true // the field's name: an unknown field
			}
		}
		if got, ok := inValue(c.Value, p, line, column); ok {
			return got, true
		}
	}
	return "", false
}

func at(pos *ast.Position, line, column int) bool {
	return pos != nil && pos.Line == line && pos.Column == column
}

type literalsKey struct{}

// literals is one request's (or WebSocket operation's) parse of its
// refused document.
type literals struct {
	mu    sync.Mutex
	query string
	done  bool
	doc   *ast.QueryDocument
}

// withLiterals gives a request (or an operation) its memo for literalPath.
func withLiterals(ctx context.Context) context.Context {
	return context.WithValue(ctx, literalsKey{}, &literals{})
}

func (m *literals) parse(query string) *ast.QueryDocument {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.done || m.query != query {
		m.query, m.done, m.doc = query, true, nil
		if doc, err := parser.ParseQuery(&ast.Source{Input: query}); err == nil {
			m.doc = doc
		}
	}
	return m.doc
}
