// Package audit writes the audit record of each mutation.
package audit

import (
	"context"

	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Write records who did what to which resource with which outcome. Called
// inside the mutation's transaction for successes, on its own for failures.
// detail, when not nil, is a JSON object kept with the record.
func Write(ctx context.Context, q store.Q, method, resource, outcome string, detail []byte) error {
	var pid *string
	if p := reqctx.PrincipalFrom(ctx); p != nil {
		pid = &p.ID
	}
	_, err := q.ExecContext(ctx, `
		INSERT INTO audit_log (audit_id, principal_id, method, resource, outcome, request_id, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)`,
		ids.New(ids.Audit), pid, method, resource, outcome, reqctx.RequestID(ctx), nullable(detail))
	return store.Wrap(err)
}

func nullable(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}
