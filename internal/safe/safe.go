// Package safe runs the goroutines and timer callbacks the server starts.
// A panic in one of them would end the whole process (net/http recovers
// only its handlers' goroutines), so every one runs through here: a panic
// is recovered and logged as an error with the request id of the work it
// served and its stack, the caller's onPanic cleans up (ends the stream,
// closes the socket), and the process serves on.
//
// TestEveryGoroutineIsSafe fails on a go statement or an AfterFunc callback
// in the server's packages that does not go through this package.
package safe

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"

	"github.com/bettercompute/computed/internal/reqctx"
)

// panics counts recovered panics (for tests and metrics).
var panics atomic.Int64

// Panics is the number of panics recovered since the process started.
func Panics() int64 { return panics.Load() }

// Do runs fn on the calling goroutine and recovers a panic in it: it is
// logged, onPanic (if any) runs, and Do returns true.
func Do(ctx context.Context, log *slog.Logger, what string, fn func(), onPanic ...func()) (panicked bool) {
	if ctx == nil {
		ctx = context.Background()
	}
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			report(ctx, log, what, v)
			for _, f := range onPanic {
				Do(ctx, log, what+" (after a panic)", f)
			}
		}
	}()
	fn()
	return false
}

// Go runs fn on a new goroutine, as Do does.
func Go(ctx context.Context, log *slog.Logger, what string, fn func(), onPanic ...func()) {
	go Do(ctx, log, what, fn, onPanic...)
}

// Func wraps fn for a callback that runs on a goroutine the caller does not
// start itself (time.AfterFunc, context.AfterFunc), as Do does.
func Func(ctx context.Context, log *slog.Logger, what string, fn func(), onPanic ...func()) func() {
	return func() { Do(ctx, log, what, fn, onPanic...) }
}

func report(ctx context.Context, log *slog.Logger, what string, v any) {
	panics.Add(1)
	if log == nil {
		log = slog.Default()
	}
	log.ErrorContext(ctx, "panic in goroutine", "goroutine", what, "panic", fmt.Sprint(v),
		"requestId", reqctx.RequestID(ctx), "stack", string(debug.Stack()))
}
