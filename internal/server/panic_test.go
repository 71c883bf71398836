package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/internal/errs"
)

// panicking is an executor whose parsing panics, as gqlparser did reading
// a literal it had not validated (since: 1e400).
type panicking struct{}

func (panicking) CreateOperationContext(context.Context, *graphql.RawParams) (*graphql.OperationContext, gqlerror.List) {
	panic("strconv.ParseInt: parsing \"123\": value out of range")
}
func (panicking) DispatchOperation(context.Context, *graphql.OperationContext) (graphql.ResponseHandler, context.Context) {
	return nil, nil
}
func (panicking) DispatchError(context.Context, gqlerror.List) *graphql.Response { return nil }
func (panicking) PresentRecoveredError(context.Context, any) error {
	return &gqlerror.Error{Message: "internal error", Extensions: map[string]any{"code": string(errs.Internal)}}
}

// A panic that escapes the executor is answered as every answer is: 500
// INTERNAL in the GraphQL error shape, under the negotiated media type
// (gqlgen's handler wrote it with no Content-Type: text/plain), without
// the panic's words.
func TestAPanicIsAnsweredInTheErrorShape(t *testing.T) {
	for _, accept := range []string{"", mediaGraphQLJSON} {
		r := httptest.NewRequest("POST", "/graphql", strings.NewReader(`{"query":"{ viewer { kind } }"}`))
		r.Header.Set("Content-Type", mediaJSON)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		w := httptest.NewRecorder()
		httpTransport{}.Do(w, r, panicking{})
		var body struct {
			Errors []struct {
				Message    string
				Extensions map[string]any
			}
		}
		want := accept
		if want == "" {
			want = mediaJSON
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 500 || w.Header().Get("Content-Type") != want ||
			len(body.Errors) != 1 || body.Errors[0].Extensions["code"] != "INTERNAL" || strings.Contains(w.Body.String(), "strconv") {
			t.Fatalf("Accept %q: %d %v %s", accept, w.Code, w.Header(), w.Body)
		}
	}
}
