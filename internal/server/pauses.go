package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bettercompute/computed/internal/safe"
)

// pauseTick is how often the pause clock looks at the time.
const pauseTick = 250 * time.Millisecond

// pauseClock measures how long this process did not run: stopped
// (SIGSTOP, a paused VM) or starved. A goroutine looks at the time every
// pauseTick; what a look comes later than two ticks after the previous one
// is a pause. A socket's silence is judged without the pauses since its
// client was last heard: while the process does not run, the client's
// answers wait unread in the socket (a replica resumed after a 20 s stop
// closed its healthy sockets, their pongs unread).
type pauseClock struct {
	once  sync.Once
	total atomic.Int64 // the pauses counted so far (ns)
	last  atomic.Int64 // the last look (UnixNano)
}

// pauses is the process's pause clock (one goroutine for the process,
// started by the first WebSocket).
var pauses pauseClock

func (p *pauseClock) start() {
	p.once.Do(func() {
		p.last.Store(time.Now().UnixNano())
		safe.Go(context.Background(), slog.Default(), "pause clock", func() {
			t := time.NewTicker(pauseTick)
			for range t.C {
				p.observe(time.Now())
			}
		})
	})
}

// observe is one look at the time.
func (p *pauseClock) observe(now time.Time) {
	last := p.last.Swap(now.UnixNano())
	if gap := now.Sub(time.Unix(0, last)) - pauseTick; gap > pauseTick {
		p.total.Add(int64(gap))
	}
}

// at is the pauses up to now, including one still going on that the
// goroutine has not looked at yet (the process just resumed and a timer
// ran before it).
func (p *pauseClock) at(now time.Time) time.Duration {
	total := time.Duration(p.total.Load())
	if gap := now.Sub(time.Unix(0, p.last.Load())) - pauseTick; gap > pauseTick {
		total += gap
	}
	return total
}

// silentTooLong says a socket's client answers no ping: nothing heard from
// it for longer than pongTimeout, not counting the time the process did
// not run since (paused).
func silentTooLong(now, heard time.Time, paused, pongTimeout time.Duration) bool {
	return now.Sub(heard)-paused > pongTimeout
}
