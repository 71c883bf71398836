package relay

import (
	"strconv"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/bettercompute/computed/internal/page"
)

// DefaultFirst is the page size a connection field reads when its first is
// left out or given as null: the default its schema states (an explicit
// null takes no default in GraphQL), else page.DefaultLimit. The resolvers
// page with it and the cost rule charges it, so both read one number:
// inventoryHistory(first: null) paged 20 and was charged 50.
func DefaultFirst(def *ast.FieldDefinition) int {
	if def != nil {
		if a := def.Arguments.ForName("first"); a != nil && a.DefaultValue != nil {
			if n, err := strconv.Atoi(a.DefaultValue.Raw); err == nil {
				return n
			}
		}
	}
	return page.DefaultLimit
}
