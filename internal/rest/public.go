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
		case e.Code == errs.Unavailable && (e.Details["reason"] == "deadline" || e.Details["reason"] == "busy"):
			// Every field still loading when a request's deadline passes
			// fails with it (120 lines for one request): logged once. A
			// database that does not answer shows here too, as requests
			// past their deadline.
			if reqctx.LogOnce(ctx, "deadline") {
				log.WarnContext(ctx, "request past its deadline", append([]any{"requestId", id, "reason", e.Details["reason"], "err", err}, kv...)...)
			}
		case e.Code == errs.Unavailable:
			log.WarnContext(ctx, "database unavailable", append([]any{"requestId", id, "err", err}, kv...)...)
		}
		return errs.Public(e, id)
	}
	log.ErrorContext(ctx, "internal error", append([]any{"requestId", id, "err", err}, kv...)...)
	return errs.Public(err, id)
}
