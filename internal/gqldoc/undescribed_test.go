package gqldoc_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/gqldoc"
)

// undescribed lists what GraphiQL's Docs pane would show without words:
// object, interface, enum and input types, the arguments of fields
// (first and after of every connection among them: their bounds showed
// nowhere), and the values of enums (92 showed none: what a join request
// CONSUMED or a token EXHAUSTED means was written nowhere in the pane).
func undescribed(s *ast.Schema) (types, args, values []string) {
	for name, def := range s.Types {
		if def.BuiltIn || strings.HasPrefix(name, "__") {
			continue
		}
		switch def.Kind {
		case ast.Object, ast.Interface, ast.Enum, ast.InputObject, ast.Scalar, ast.Union:
			if def.Description == "" {
				types = append(types, name)
			}
		}
		for _, v := range def.EnumValues {
			if v.Description == "" {
				values = append(values, name+"."+v.Name)
			}
		}
		if def.Kind != ast.Object && def.Kind != ast.Interface {
			continue
		}
		for _, f := range def.Fields {
			if strings.HasPrefix(f.Name, "__") {
				continue // introspection's own
			}
			for _, a := range f.Arguments {
				if a.Description == "" {
					args = append(args, name+"."+f.Name+"("+a.Name+")")
				}
			}
		}
	}
	sort.Strings(types)
	sort.Strings(args)
	sort.Strings(values)
	return types, args, values
}

// The served schema describes every type, every argument and every enum
// value: a new type, argument or enum value without words fails here.
func TestTheDocsPaneDescribesEveryTypeAndArgument(t *testing.T) {
	types, args, values := undescribed(gqldoc.Describe(parsed(), app.Registry(nil, nil, nil, nil)))
	if len(types) > 0 {
		t.Errorf("%d types without a description: %s", len(types), strings.Join(types, ", "))
	}
	if len(args) > 0 {
		t.Errorf("%d arguments without a description: %s", len(args), strings.Join(args, ", "))
	}
	if len(values) > 0 {
		t.Errorf("%d enum values without a description: %s", len(values), strings.Join(values, ", "))
	}
}

// The served descriptions are paragraphs, not the schema files' wrapped
// lines: GraphiQL's Docs pane broke a line at every newline (13
// descriptions read ragged in its narrow pane).
func TestDescriptionsAreNotHardWrapped(t *testing.T) {
	s := gqldoc.Describe(parsed(), app.Registry(nil, nil, nil, nil))
	check := func(where, d string) {
		for _, p := range strings.Split(d, "\n\n") {
			for i, l := range strings.Split(p, "\n") {
				l = strings.TrimSpace(l)
				if i > 0 && !strings.HasPrefix(l, "- ") && !strings.HasPrefix(l, "* ") && !strings.HasPrefix(l, "|") {
					t.Errorf("%s: a wrapped line %q", where, l)
					return
				}
			}
		}
	}
	for name, def := range s.Types {
		if def.BuiltIn {
			continue
		}
		check(name, def.Description)
		for _, f := range def.Fields {
			check(name+"."+f.Name, f.Description)
			for _, a := range f.Arguments {
				check(name+"."+f.Name+"("+a.Name+")", a.Description)
			}
		}
		for _, v := range def.EnumValues {
			check(name+"."+v.Name, v.Description)
		}
	}
	for name, def := range s.Types {
		for _, f := range def.Fields {
			switch f.Name {
			case "id", "createdAt", "updatedAt", "rowVersion", "tenantId", "poolId", "name":
				if f.Description == "" && !def.BuiltIn {
					t.Errorf("%s.%s has no description", name, f.Name)
				}
			}
		}
	}
	if got := gqldoc.Unwrap("one\ntwo\n\n- a\n- b\nthree"); got != "one two\n\n- a\n- b three" {
		t.Errorf("Unwrap: %q", got)
	}
}
