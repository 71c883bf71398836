package store

import (
	"context"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/reqctx"
)

// ReadBudget is what one request (an HTTP call, an operation on a
// WebSocket) may read of large values: profile documents, the documents
// and steps workflows snapshot, inventory sections. Every such row is at
// most a few hundred KiB, but lists multiply them: a page of 200, a
// GraphQL operation of many pages or of pages nested in pages, one
// batched statement for all of them. A probe's query of five pages of 20
// profiles was a 97.5 MB answer, and 100 connections of 200 rows could
// have been gigabytes.
const ReadBudget = 64 << 20

// Sized is a row that says how many bytes of large values it holds.
type Sized interface{ ReadSize() int }

// Spend spends n bytes of the request's read budget: the read-budget
// refusal once it is spent.
func Spend(ctx context.Context, n int) error {
	if !reqctx.Spend(ctx, n) {
		return errs.E(errs.InvalidInput, "this request reads more than %d MiB of documents, policies and inventory: ask for smaller pages (first, limit) or fewer of them", ReadBudget>>20).
			With("reason", "read-budget").With("limit", ReadBudget)
	}
	return nil
}

// SelectSpending is SelectContext for rows of large values: each row is
// spent from the request's read budget (reqctx.WithReadBudget) as it is
// scanned, and once the budget is spent the statement stops there and the
// request is refused, INVALID_INPUT with details.reason "read-budget",
// having held at most the budget and one row.
func SelectSpending[T any, PT interface {
	*T
	Sized
}](ctx context.Context, q Q, dest *[]T, query string, args ...any) error {
	if db, ok := q.(*DB); ok { // a transaction holds its place already
		leave, err := db.enter(ctx)
		if err != nil {
			return Wrap(err)
		}
		defer leave()
	}
	rows, err := q.QueryxContext(ctx, query, args...)
	if err != nil {
		return Wrap(err)
	}
	defer rows.Close()
	for rows.Next() {
		var t T
		if err := rows.StructScan(&t); err != nil {
			return Wrap(err)
		}
		if err := Spend(ctx, PT(&t).ReadSize()); err != nil {
			return err
		}
		*dest = append(*dest, t)
	}
	return Wrap(rows.Err())
}
