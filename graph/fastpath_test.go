package graph

import (
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
)

func TestSelectsResolved(t *testing.T) {
	f := func(name string, sub ...ast.Selection) *ast.Field {
		return &ast.Field{Name: name, Alias: name, SelectionSet: sub}
	}
	for _, c := range []struct {
		name string
		sel  ast.SelectionSet
		want bool
	}{
		{"bound fields only", ast.SelectionSet{f("cursor"), f("node", f("name"), f("site"), f("__typename"))}, false},
		{"a resolver field (nodes)", ast.SelectionSet{f("node", f("name"), f("nodes", f("totalCount")))}, true},
		{"a resolver field in an inline fragment", ast.SelectionSet{f("node", &ast.InlineFragment{TypeCondition: "Pool", SelectionSet: ast.SelectionSet{f("id")}})}, true},
		{"a fragment spread without its definition", ast.SelectionSet{f("node", &ast.FragmentSpread{Name: "F"})}, true},
		{"an unknown field", ast.SelectionSet{f("node", f("noSuchField"))}, true},
	} {
		if got := selectsResolved("PoolEdge", c.sel, 0); got != c.want {
			t.Errorf("%s: selectsResolved = %v, want %v", c.name, got, c.want)
		}
	}
	if !selectsResolved("NoSuchType", nil, 0) {
		t.Error("an unknown type must count as resolving")
	}
}
