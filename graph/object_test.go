package graph

import (
	"bytes"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// marshalObject writes what gqlgen's FieldSet.MarshalGQL writes: each alias
// once, the first value of a repeated alias, in order.
func TestMarshalObjectWritesWhatFieldSetWrites(t *testing.T) {
	field := func(alias string) graphql.CollectedField {
		return graphql.CollectedField{Field: &ast.Field{Alias: alias, Name: alias}}
	}
	for _, aliases := range [][]string{{}, {"a"}, {"a", "b"}, {"a", "b", "a", "c", "b"}, {"__typename", "id", "x_1"}} {
		fields := make([]graphql.CollectedField, len(aliases))
		for i, a := range aliases {
			fields[i] = field(a)
		}
		fs := graphql.NewFieldSet(fields)
		for i := range fields {
			fs.Values[i] = graphql.MarshalInt(i)
		}
		var want, got bytes.Buffer
		fs.MarshalGQL(&want)
		marshalObject(fields, fs).MarshalGQL(&got)
		if got.String() != want.String() {
			t.Fatalf("%v: got %s, want %s", aliases, got.String(), want.String())
		}
	}
}
