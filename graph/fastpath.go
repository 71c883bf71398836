package graph

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
)

// DirectLeaves lets the executor marshal leaf fields read straight from the
// bound struct without gqlgen's per-field machinery (field context, field
// middleware, panic guard): see internal/gqlfast, which writes the calls.
// Such fields cannot fail or panic; but a field interceptor (an extension
// implementing graphql.FieldInterceptor) would not see them, so the server
// turns this off when it installs one.
var DirectLeaves = true

// newDeferredGroup is graphql.NewDeferredGroup for an object with a
// deferred field (@defer), and an empty group otherwise: gqlgen's own
// builds the object's path, a field set and a map for every object of
// every query. ResolveConcurrently touches the group only for deferred
// fields, and an empty group is never processed.
func newDeferredGroup(ctx context.Context, fields []graphql.CollectedField) graphql.DeferredGroup {
	for i := range fields {
		if fields[i].IsDeferred() {
			return graphql.NewDeferredGroup(ctx)
		}
	}
	return graphql.DeferredGroup{}
}
