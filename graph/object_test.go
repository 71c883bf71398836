package graph

import (
	"bytes"
	"context"
	"fmt"
	"strings"
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

// An inline list shares one field context among its elements, moving its
// index along: an error or a panic in an element still names that
// element's index in its path.
func TestInlineListErrorsNameTheirIndex(t *testing.T) {
	ctx := graphql.WithResponseContext(context.Background(), graphql.DefaultErrorPresenter, graphql.DefaultRecover)
	ctx = graphql.WithFieldContext(ctx, &graphql.FieldContext{Field: graphql.CollectedField{Field: &ast.Field{Alias: "gpus", Name: "gpus"}}})
	marshalSliceInline(ctx, 4, func(ctx context.Context, i int) graphql.Marshaler {
		switch i {
		case 1:
			graphql.AddErrorf(ctx, "bad element")
		case 2:
			panic("boom")
		}
		return graphql.MarshalInt(i)
	})
	errs := graphql.GetErrors(ctx)
	if len(errs) != 2 {
		t.Fatalf("errors: %v", errs)
	}
	for k, want := range []string{"gpus.1", "gpus.2"} {
		var parts []string
		for _, p := range errs[k].Path {
			parts = append(parts, fmt.Sprint(p))
		}
		if got := strings.Join(parts, "."); got != want {
			t.Fatalf("error %d path %s, want %s", k, got, want)
		}
	}
}

// The cost of writing one object of five fields, gqlgen's FieldSet against
// marshalObject (the figures of the upstream issue in docs/design.md).
func BenchmarkObjectMarshal(b *testing.B) {
	fields := make([]graphql.CollectedField, 5)
	for i, a := range []string{"uuid", "index", "model", "memoryMiB", "migMode"} {
		fields[i] = graphql.CollectedField{Field: &ast.Field{Alias: a, Name: a}}
	}
	fs := graphql.NewFieldSet(fields)
	for i := range fields {
		fs.Values[i] = graphql.MarshalInt(i)
	}
	var buf bytes.Buffer
	b.Run("gqlgen FieldSet", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			fs.MarshalGQL(&buf)
		}
	})
	b.Run("marshalObject", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			marshalObject(fields, fs).MarshalGQL(&buf)
		}
	})
}
