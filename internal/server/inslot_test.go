package server

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/bettercompute/computed/internal/fair"
)

// The execution slot's wrapper of a query's response handler. gqlgen
// answers nil, at first, once the operation's context has ended: an
// operation whose slot came as its deadline passed wrote a nil response,
// and the HTTP transport's panic answered INTERNAL (a helper's probe under
// a frozen database, 3 of 6 runs). It answers the deadline, and only on the
// first call: the streaming transports call the handler until it answers
// nil, and an answer of its own there repeated without end (d11e608).
func TestInSlotAnswersForAnEndedOperation(t *testing.T) {
	s := &Server{execSlots: fair.New(1), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	code := func(r *graphql.Response) any {
		if r == nil || len(r.Errors) != 1 {
			t.Fatalf("want one error, got %#v", r)
		}
		return r.Errors[0].Extensions["code"]
	}

	// The slot is free and the deadline has passed: gqlgen answers nil.
	ended, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	calls := 0
	h := s.inSlot(func(ctx context.Context) *graphql.Response { calls++; return nil })
	if c := code(h(ended)); c != "UNAVAILABLE" {
		t.Fatalf("an ended operation answered %v, want UNAVAILABLE", c)
	}
	if r := h(ended); r != nil {
		t.Fatalf("the second call answered %#v, want gqlgen's nil (the stream's end)", r)
	}
	if calls != 2 || s.execSlots.InUse() != 0 {
		t.Fatalf("gqlgen called %d times, %d slots held after", calls, s.execSlots.InUse())
	}

	// A streaming transport: an answer, then nil, passed through as they are.
	answers := []*graphql.Response{{Data: []byte(`{"a":1}`)}, nil}
	h = s.inSlot(func(ctx context.Context) *graphql.Response { r := answers[0]; answers = answers[1:]; return r })
	if r := h(context.Background()); r == nil || string(r.Data) != `{"a":1}` {
		t.Fatalf("first answer %#v", r)
	}
	if r := h(context.Background()); r != nil {
		t.Fatalf("second answer %#v, want nil", r)
	}

	// Every slot held: an operation whose deadline passes while it waits
	// is told the server is busy, and gqlgen is not called.
	s.execSlots.Acquire(context.Background(), "other")
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	called := false
	h = s.inSlot(func(ctx context.Context) *graphql.Response { called = true; return nil })
	r := h(short)
	if c := code(r); c != "UNAVAILABLE" || called || r.Errors[0].Extensions["details"].(map[string]any)["reason"] != "busy" {
		t.Fatalf("busy: code %v, gqlgen called %v, details %v", c, called, r.Errors[0].Extensions["details"])
	}
	s.execSlots.Release("other")
}
