package server

import (
	"context"
	"strconv"
	"sync"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// literalPath names the argument value of the document at line:column,
// where the validator located an argument literal it refused ("Int cannot
// represent non-integer value: 1.5" at first: 1.5), as details.path names
// a refused variable or field: the argument ("first"), then the fields and
// indexes inside it ("size.gpus"); a mutation's input argument is the
// method's input, so its fields are named without it, as the method's
// own refusals name them. "" when no argument value starts there (the
// validator located something else, or the document does not parse).
// Only a refused document is parsed again: the validator returns no
// document with its errors.
// The document is parsed once per request (the memo in ctx, withLiterals:
// a refused document of a thousand bad literals is a thousand errors); a
// context without one names no path.
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
	var inSet func(ast.SelectionSet)
	inSet = func(set ast.SelectionSet) {
		for _, sel := range set {
			if found != "" {
				return
			}
			switch s := sel.(type) {
			case *ast.Field:
				for _, a := range s.Arguments {
					if p, ok := inValue(a.Value, a.Name, line, column); ok {
						if a.Name == "input" {
							p = trimInput(p)
						}
						found = p
						return
					}
				}
				inSet(s.SelectionSet)
			case *ast.InlineFragment:
				inSet(s.SelectionSet)
			}
		}
	}
	for _, op := range doc.Operations {
		inSet(op.SelectionSet)
	}
	for _, f := range doc.Fragments {
		inSet(f.SelectionSet)
	}
	return found
}

// inValue finds the value at line:column in v, named path, and returns
// its path. Depth is the document's, bounded by the parser's token limit.
func inValue(v *ast.Value, path string, line, column int) (string, bool) {
	if v == nil {
		return "", false
	}
	if v.Position != nil && v.Position.Line == line && v.Position.Column == column {
		return path, true
	}
	for i, c := range v.Children {
		p := path + "[" + strconv.Itoa(i) + "]"
		if v.Kind == ast.ObjectValue {
			p = path + "." + c.Name
		}
		if got, ok := inValue(c.Value, p, line, column); ok {
			return got, true
		}
	}
	return "", false
}

// trimInput names a path inside the input argument as the method does.
func trimInput(p string) string {
	if len(p) > len("input.") && p[:len("input.")] == "input." {
		return p[len("input."):]
	}
	return p
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
