// Package ratelimit holds limits that hold across replicas: one token
// bucket per key (a credential, a client address) in PostgreSQL
// (rate_buckets), from which each replica leases tokens in batches and
// spends them locally. A request pays no round trip while its replica
// holds tokens of its key; the replica leases the next batch before the
// one it holds runs out (prefetch), sizes batches to what it spends
// (about Horizon's worth of its last whole window of Horizon, between
// MinBatch and MaxBatch; what its callers wait for when it has no such
// window, as in a burst on a quiet key), gets a batch only out of what the
// bucket holds above half the burst (Share: near the limit a lease is what
// the calls waiting need), and gives back what it stops using. When the
// shared bucket is dry the replica refuses locally until the bucket will
// have refilled, so a flood over the limit costs no round trip per
// refused request.
//
// Every token a request spends was taken from the shared bucket, so the
// replicas together never admit more than the bucket's rate and burst.
// What a replica holds and does not spend is lost to the others until it
// gives it back (after IdleReturn) or, if it dies, until the bucket
// refills: at most MaxBatch per key and replica.
//
// When the database does not answer, a key falls back to a bucket of this
// replica alone (the limit times the replicas at worst) until it answers.
package ratelimit

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/bettercompute/computed/internal/safe"
	"github.com/bettercompute/computed/internal/store"
)

// Config is one limit.
type Config struct {
	// Scope names the limit's rows in rate_buckets ("requests",
	// "auth-failures").
	Scope string
	// Rate is tokens per second; Burst the bucket's size.
	Rate  float64
	Burst int
	// MinBatch and MaxBatch bound one lease (defaults 1 and Burst/8, at
	// least 1). MaxBatch is what one replica may hold of a key: with N
	// replicas, N×MaxBatch of the burst can sit in replicas' hands.
	MinBatch, MaxBatch int
	// Horizon sizes batches: a replica spending λ tokens a second of a key
	// leases about λ×Horizon at a time (default 200 ms).
	Horizon time.Duration
	// Prefetch leases the next batch, in the background, once the tokens
	// held fall to half a batch.
	Prefetch bool
	// IdleReturn gives back tokens a replica has held unused this long
	// (default 1 s).
	IdleReturn time.Duration
	// DryWait is the least a replica waits before it asks a dry bucket
	// again (default 50 ms): a flooded key costs at most 1/DryWait leases
	// a second per replica.
	DryWait time.Duration
	// Share bounds a lease by what the shared bucket holds: past what the
	// calls waiting need, at most 1/Share (default 4) of what it holds
	// above half the burst. Batches shrink as the bucket empties and stop
	// at half of it, so near the limit no replica holds tokens ahead of
	// its calls while another's call finds the bucket short of them (a
	// replica whose callers were all served; costly operations spread
	// over replicas).
	Share int
}

func (c *Config) defaults() {
	if c.Burst < 1 {
		c.Burst = 1
	}
	if c.MinBatch < 1 {
		c.MinBatch = 1
	}
	if c.MaxBatch < 1 {
		c.MaxBatch = max(1, c.Burst/8)
	}
	c.MaxBatch = min(c.MaxBatch, c.Burst)
	c.MinBatch = min(c.MinBatch, c.MaxBatch)
	if c.Horizon <= 0 {
		c.Horizon = 200 * time.Millisecond
	}
	if c.IdleReturn <= 0 {
		c.IdleReturn = time.Second
	}
	if c.DryWait <= 0 {
		c.DryWait = 50 * time.Millisecond
	}
	if c.Share < 1 {
		c.Share = 4
	}
}

// Limiter is one limit on this replica.
type Limiter struct {
	db  *store.DB
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	m  map[string]*bucket

	leases, returns atomic.Int64
	warned          atomic.Int64 // unix seconds of the last "unreachable" warning
}

// bucket is what this replica knows of one key.
type bucket struct {
	tokens   float64       // leased, not yet spent
	until    time.Time     // the shared bucket was dry: refuse until then
	fetching chan struct{} // closed when the lease in flight ends
	batch    int           // the last lease's size
	leasedAt time.Time
	// The replica's spending of key, for the size of its leases: spent
	// in all, and at since, the start of the current window; rate is the
	// last whole window's (at least Horizon long; 0 before the first).
	spent, spentAt int
	since          time.Time
	rate           float64
	lastUse        time.Time
	// What the shared bucket held after the last lease, and when: the
	// least wait for a call that needs more than until was reckoned for.
	sharedLeft float64
	// waiting counts the tokens calls waiting for the lease in flight
	// need: the next lease asks for them too (up to MaxBatch).
	waiting int
	// While the database does not answer: this replica's own bucket.
	local      *rate.Limiter
	localUntil time.Time
}

// New makes a limiter over db's rate_buckets.
func New(db *store.DB, cfg Config, log *slog.Logger) *Limiter {
	cfg.defaults()
	if log == nil {
		log = slog.Default()
	}
	return &Limiter{db: db, cfg: cfg, log: log, m: map[string]*bucket{}}
}

// Burst is the bucket's size: the most one call can ask for.
func (l *Limiter) Burst() int { return l.cfg.Burst }

// Wait is how long the bucket takes to refill n tokens.
func (l *Limiter) Wait(n int) time.Duration {
	return time.Duration(float64(n) / l.cfg.Rate * float64(time.Second))
}

// Leases is the number of leases this replica has taken (a statement each).
func (l *Limiter) Leases() int64 { return l.leases.Load() }

// Allow spends n tokens of key, or says how long until it could. err is
// ctx's error when ctx ended while the call waited for its replica's lease
// of key (a database that does not answer, a request past its deadline):
// that is not a refusal, and the caller answers it as the deadline.
//
// A call waits for leases until it gets its tokens, the shared bucket is
// dry (every waiter is then refused until it refills), the database fails
// (the replica's own bucket decides), or ctx ends: each lease either
// grants tokens or finds the bucket dry, so the waiters make progress. A
// burst of concurrent calls on a full bucket is admitted whole, in leases
// of up to MaxBatch (waiters that lost five rounds to others were
// refused, inside the burst).
func (l *Limiter) Allow(ctx context.Context, key string, n int) (bool, time.Duration, error) {
	if n > l.cfg.Burst {
		return false, time.Minute, nil
	}
	for {
		now := time.Now()
		l.mu.Lock()
		b := l.m[key]
		if b == nil {
			b = &bucket{}
			l.m[key] = b
		}
		b.lastUse = now
		if b.tokens >= float64(n) {
			b.tokens -= float64(n)
			b.spent += n
			var ch chan struct{}
			var want int
			// Prefetch for a replica that spends the key steadily (a
			// whole window of it): what a key spent in a burst or by one
			// call is not a rate, and a batch leased on it would sit
			// unspent here when the next call comes to another replica
			// (a costly GraphQL operation refused on a bucket short by
			// the replicas' prefetched tokens).
			if l.cfg.Prefetch && b.fetching == nil && b.tokens <= float64((b.batch+1)/2) && !now.Before(b.until) && !now.Before(b.localUntil) {
				// The bucket gives a prefetch only what it holds above
				// half the burst: ask when it may (what it held at the
				// last lease, and its refill since).
				above := l.sharedNow(b, now) > l.half()
				if w := l.want(b, now, 1); l.batches(b) && above {
					ch, want = make(chan struct{}), w
					b.fetching = ch
				}
			}
			l.mu.Unlock()
			if ch != nil {
				l.goLease(key, b, want, 0, ch) // ahead of any call: none needs it
			}
			return true, 0, nil
		}
		if now.Before(b.localUntil) {
			r := b.local.ReserveN(now, n)
			d := r.DelayFrom(now)
			if !r.OK() || d > 0 {
				r.CancelAt(now)
				l.mu.Unlock()
				return false, max(d, time.Second), nil
			}
			l.mu.Unlock()
			return true, 0, nil
		}
		// until was reckoned for the call that found the bucket dry. A
		// call the bucket held enough for at that lease, or has refilled
		// enough for since, once DryWait has passed, still asks it (a call
		// takes nothing of a bucket that cannot pay it, so a costly call's
		// refusal left the rest to cheaper ones: they were refused with it
		// until the costly one's wait passed, half a second for a call of
		// 50).
		payable := float64(n)-b.tokens <= b.sharedLeft ||
			now.Sub(b.leasedAt) >= l.cfg.DryWait && float64(n)-b.tokens <= l.sharedNow(b, now)
		if now.Before(b.until) && !payable {
			// The wait told is until the bucket will have refilled the
			// call's whole need (a wait too short is refused again), for
			// the shared bucket alone: the tokens this replica holds are
			// no help to a retry that another replica takes (it was
			// refused again when told the wait less what this one held).
			d := b.until.Sub(now)
			if n > 1 {
				short := float64(n) - b.sharedLeft
				d = max(d, time.Duration(short/l.cfg.Rate*float64(time.Second))-now.Sub(b.leasedAt))
			}
			l.mu.Unlock()
			return false, d, nil
		}
		ch := b.fetching
		if ch == nil {
			ch = make(chan struct{})
			b.fetching = ch
			// The tokens held count toward the call: the bucket is asked
			// for the rest (asked for all of it, a bucket holding the rest
			// gave nothing, and the call was refused with its tokens at
			// hand).
			short := n - int(b.tokens)
			want := max(l.want(b, now, short), min(short+b.waiting, l.cfg.MaxBatch))
			l.mu.Unlock()
			l.lease(key, b, want, short, ch)
			continue
		}
		b.waiting += n
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		l.mu.Lock()
		b.waiting -= n
		l.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return false, 0, err
		}
	}
}

// want is the next lease's size for b (l.mu held): about Horizon's worth
// of what this replica spent of key in its last whole window of at least
// Horizon, or what its callers need when it has no such window. A burst
// of callers on a key that was quiet is served by leases of what they
// wait for: extrapolated from the burst's first milliseconds (200 tokens
// in 2 ms, a rate of 100,000 a second), a batch would sit unspent once
// they were all served, while another replica's callers found the bucket
// dry (161 of a burst of 200 admitted over three replicas).
func (l *Limiter) want(b *bucket, now time.Time, need int) int {
	if el := now.Sub(b.since); el >= l.cfg.Horizon {
		// A window after a quiet time is long, and its rate small.
		b.rate = 0
		if !b.since.IsZero() {
			b.rate = float64(b.spent-b.spentAt) / el.Seconds()
		}
		b.since, b.spentAt = now, b.spent
	}
	if !l.batches(b) {
		return need
	}
	w := max(l.cfg.MinBatch, int(math.Ceil(b.rate*l.cfg.Horizon.Seconds())))
	return max(min(w, l.cfg.MaxBatch), need)
}

// batches says whether this replica asks for b's key in batches and ahead
// of its calls (l.mu held, after want's window): when it has spent the key
// steadily, a whole window of it. A burst, or a key called now and then,
// is not a rate. The shared bucket gives a batch only out of what it holds
// above half the burst (take): near the limit, tokens leased ahead sit
// unspent in one replica while another's call finds the bucket short of
// them (costly GraphQL operations round-robin over three replicas at 4 a
// second were admitted 300 units of the 377 their budget allowed). There a
// lease is what the calls waiting need: a statement per call admitted at
// most, for a key spending near its limit.
func (l *Limiter) batches(b *bucket) bool { return b.rate > 0 }

// sharedNow estimates what the shared bucket holds (l.mu held): what it held
// after b's last lease and its refill since; other replicas' spending is not
// seen.
func (l *Limiter) sharedNow(b *bucket, now time.Time) float64 {
	return b.sharedLeft + l.cfg.Rate*now.Sub(b.leasedAt).Seconds()
}

// half is half the burst: the bucket gives batches and prefetches only out
// of what it holds above it (take).
func (l *Limiter) half() float64 { return float64(l.cfg.Burst) / 2 }

// goLease runs lease on its own goroutine; a panic is logged and the
// waiters on ch are released (the key falls back to asking again).
func (l *Limiter) goLease(key string, b *bucket, want, need int, ch chan struct{}) {
	safe.Go(context.Background(), l.log, "rate limit lease", func() { l.lease(key, b, want, need, ch) }, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if b.fetching == ch {
			b.fetching = nil
			close(ch)
		}
	})
}

// lease takes up to want tokens of key from the shared bucket into b, and
// closes ch. need is what the caller waits for beyond the tokens held (0 for
// a prefetch): when the bucket cannot give it, the replica refuses key until
// the bucket will have refilled that much.
func (l *Limiter) lease(key string, b *bucket, want, need int, ch chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	granted, left, err := l.take(ctx, key, want, need)
	cancel()
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	defer close(ch)
	b.fetching = nil
	if err != nil {
		if b.local == nil {
			b.local = rate.NewLimiter(rate.Limit(l.cfg.Rate), l.cfg.Burst)
		}
		b.localUntil = now.Add(time.Second)
		if last := l.warned.Load(); now.Unix()-last >= 10 && l.warned.CompareAndSwap(last, now.Unix()) {
			l.log.Warn("shared rate limit unavailable: limiting per replica until the database answers", "scope", l.cfg.Scope, "err", err)
		}
		return
	}
	l.leases.Add(1)
	b.tokens += float64(granted)
	b.batch, b.leasedAt, b.sharedLeft = want, now, left
	if granted < want && left < float64(need) {
		// The bucket is dry: nobody here asks it again (a prefetch
		// neither) until it will have refilled what the caller needs, and
		// not before DryWait; tokens still held are spent meanwhile.
		d := time.Duration((float64(need) - left) / l.cfg.Rate * float64(time.Second))
		b.until = now.Add(max(d, l.cfg.DryWait))
	}
}

// take leases up to want whole tokens of key: the bucket refills at Rate
// since it was last touched (up to Burst), then gives what it has: need,
// and more only out of what it holds above half the burst (Share). One
// statement; a new key's bucket starts full.
func (l *Limiter) take(ctx context.Context, key string, want, need int) (granted int, left float64, err error) {
	const refilled = `least($3::float8, b.tokens + $4::float8 * greatest(0, extract(epoch FROM statement_timestamp() - b.at)::float8))`
	// What a lease may take of a bucket holding h tokens: nothing when h
	// falls short of need (a part of it would sit in this replica, which
	// refuses the call, while the next call on another replica found the
	// bucket dry: costly operations paced over replicas); else up to want,
	// at most need or its share, and for a call all of it rather than
	// leave less than one DryWait's refill (which the next lease would
	// come for at once). A prefetch needs nothing: near the limit it gets
	// nothing.
	grant := func(h string) string {
		share := `greatest($6::int, floor(greatest(` + h + ` - $9::float8, 0) / $7::int)::int)`
		return `CASE WHEN floor(` + h + `)::int < $6::int THEN 0 ELSE least($5::int, floor(` + h + `)::int, CASE WHEN $6::int > 0 AND floor(` + h + `)::int - ` + share + ` < $8::int THEN floor(` + h + `)::int ELSE ` + share + ` END) END`
	}
	err = l.db.QueryRowxContext(ctx, `
		INSERT INTO rate_buckets AS b (scope, key, tokens, granted, at)
		VALUES ($1, $2, $3::float8 - `+grant("$3::float8")+`, `+grant("$3::float8")+`, statement_timestamp())
		ON CONFLICT (scope, key) DO UPDATE SET
			granted = `+grant(refilled)+`,
			tokens = `+refilled+` - `+grant(refilled)+`,
			at = greatest(b.at, statement_timestamp())
		RETURNING granted, tokens`, l.cfg.Scope, key, float64(l.cfg.Burst), l.cfg.Rate, want, need, l.cfg.Share,
		int(math.Ceil(l.cfg.Rate*l.cfg.DryWait.Seconds())), l.half()).Scan(&granted, &left)
	return granted, left, err
}

// Run gives back the tokens of keys this replica stopped using and forgets
// keys it has not seen for a minute, until ctx ends.
func (l *Limiter) Run(ctx context.Context) {
	t := time.NewTicker(l.cfg.IdleReturn / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.giveBack(ctx, time.Now())
		}
	}
}

// giveBack returns idle leases to the shared buckets in one statement.
func (l *Limiter) giveBack(ctx context.Context, now time.Time) {
	var keys []string
	var ns []float64
	l.mu.Lock()
	for k, b := range l.m {
		if b.fetching != nil {
			continue
		}
		idle := now.Sub(b.lastUse)
		if idle >= l.cfg.IdleReturn && b.tokens >= 1 {
			n := math.Floor(b.tokens)
			b.tokens -= n
			b.since, b.rate, b.leasedAt = time.Time{}, 0, time.Time{}
			keys, ns = append(keys, k), append(ns, n)
		}
		if idle > time.Minute && b.tokens < 1 && !now.Before(b.until) {
			delete(l.m, k)
		}
	}
	l.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	_, err := l.db.ExecContext(ctx, `
		UPDATE rate_buckets b SET
			tokens = least($3::float8, least($3::float8, b.tokens + $4::float8 * greatest(0, extract(epoch FROM statement_timestamp() - b.at)::float8)) + r.n),
			at = greatest(b.at, statement_timestamp())
		FROM unnest($1::text[], $2::float8[]) AS r(key, n)
		WHERE b.scope = $5 AND b.key = r.key`, keys, ns, float64(l.cfg.Burst), l.cfg.Rate, l.cfg.Scope)
	if err == nil {
		l.returns.Add(int64(len(keys)))
	}
	// A failed give-back loses those tokens until the bucket refills: the
	// limit is stricter for a moment, never looser.
}

// Prune deletes buckets untouched for longer than any limit takes to
// refill (they are full: the same as no row). The cluster's maintenance
// lease runs it on one replica at a time.
func Prune(ctx context.Context, db *store.DB, olderThan time.Duration) (int64, error) {
	res, err := db.ExecContext(ctx, `DELETE FROM rate_buckets WHERE at < statement_timestamp() - make_interval(secs => $1)`, olderThan.Seconds())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
