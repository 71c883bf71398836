package rest

import (
	"context"
	"log/slog"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// PublicError turns any error into what a client may see, for both
// surfaces: store.ClassifyIn maps database and context errors to contract
// codes; anything else is INTERNAL naming only the request id, and is logged
// with that id (and kv, the method or operation) so the client's
// details.requestId finds the line. A client that went away is not an
// error of the server's.
func PublicError(ctx context.Context, log *slog.Logger, err error, kv ...any) *errs.Error {
	id := reqctx.RequestID(ctx)
	if e := store.ClassifyIn(ctx, err); e != nil {
		switch {
		case e.Code == errs.Unavailable && e.Details["reason"] == "cancelled":
			log.InfoContext(ctx, "client went away", append([]any{"requestId", id}, kv...)...)
		case e.Code == errs.Unavailable:
			log.WarnContext(ctx, "database unavailable", append([]any{"requestId", id, "err", err}, kv...)...)
		}
		return errs.Public(e, id)
	}
	log.ErrorContext(ctx, "internal error", append([]any{"requestId", id, "err", err}, kv...)...)
	return errs.Public(err, id)
}
