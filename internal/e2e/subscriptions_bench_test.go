package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// BenchmarkSubscribers: one server process, 1,000 then 10,000 WebSocket
// subscribers of one tenant (graphql-transport-ws, instanceEvents), one
// event published per iteration straight into the outbox. Reports the time
// from the publishing transaction's COMMIT to each delivery (p50, p99), the
// server's memory per subscription (Go heap plus stacks after a garbage
// collection, and the resident set, measured against the server before the
// sockets opened), and the events
// per second sustained to 1,000 subscribers (bursts from 4 writers), and
// the CPU per delivery of the server and of the subscribers' process.
// BENCH_TRANSPORT=sse makes the subscribers event streams (GET
// /graphql/stream over HTTP/1.1) instead of sockets; BENCH_SUBSCRIBERS=n,m
// sets the counts.
//
// The subscribers run in this process and the server in its own, so the
// server's memory is its own; both raise their open-file limit to the hard
// limit (Go does this at start-up), which must be above the subscriber count.
func BenchmarkSubscribers(b *testing.B) {
	e := testkit.StartDB(b)
	const token = testkit.OperatorToken // metric reads /metrics with it
	// The server's pprof listener lets the benchmark collect garbage before
	// it reads the memory a subscription holds.
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	debug := dl.Addr().String()
	dl.Close()
	// Every subscriber is a socket of the one viewer token: past the
	// default 256 sockets and streams per credential.
	srv := startReplica(b, e.DB.URL, token, "COMPUTE_DEBUG_ADDR="+debug, "COMPUTE_SESSIONS_PER_CREDENTIAL=20000")
	srv.call(b, token, "tenants/create", map[string]any{"tenantId": "bench", "name": "Bench"})
	_, tok := srv.call(b, token, "tokens/create", map[string]any{"tenantId": "bench", "name": "dash", "role": "viewer"})
	viewer := tok["secret"].(string)

	f := &subFleet{addr: srv.addr, token: viewer, sse: os.Getenv("BENCH_TRANSPORT") == "sse"}
	b.Cleanup(f.close)
	before := serverMemory(b, srv, debug)
	counts := []int{1000, 10000}
	if v := os.Getenv("BENCH_SUBSCRIBERS"); v != "" { // e.g. 1000 for a quick run
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("BENCH_SUBSCRIBERS: %v", err)
			}
			counts = append(counts, n)
		}
	}
	for _, n := range counts {
		f.grow(b, n)
		after := serverMemory(b, srv, debug)
		b.Run(fmt.Sprintf("latency/%d", n), func(b *testing.B) {
			if dir := os.Getenv("BENCH_PROFILE_DIR"); dir != "" {
				go cpuProfile(fmt.Sprintf("%s/cpu-%d.pb.gz", dir, n), debug)
			}
			f.reset()
			server0, self0 := procCPU(srv.cmd.Process.Pid), procCPU(os.Getpid())
			for i := 0; i < b.N; i++ {
				f.publish(b, e, 1, 1)
			}
			b.StopTimer()
			deliveries := float64(b.N * n)
			b.ReportMetric(float64((procCPU(srv.cmd.Process.Pid)-server0).Microseconds())/deliveries, "server-cpu-µs/delivery")
			b.ReportMetric(float64((procCPU(os.Getpid())-self0).Microseconds())/deliveries, "subscribers-cpu-µs/delivery")
			p50, p99 := f.percentiles()
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(after.rss-before.rss)/1024/float64(n), "rss-KiB/sub")
			b.ReportMetric(float64(after.goBytes-before.goBytes)/1024/float64(n), "go-KiB/sub")
			b.ReportMetric(float64(after.stack-before.stack)/1024/float64(n), "stack-KiB/sub")
			b.ReportMetric((after.goroutines-before.goroutines)/float64(n), "goroutines/sub")
			b.ReportMetric(0, "ns/op")
		})
		if n == counts[0] {
			b.Run(fmt.Sprintf("events-per-second/%d", n), func(b *testing.B) {
				const burst, writers = 50, 4
				f.reset()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					f.publish(b, e, burst, writers)
				}
				secs := time.Since(start).Seconds()
				b.ReportMetric(float64(b.N*burst*writers)/secs, "events/s")
				b.ReportMetric(float64(b.N*burst*writers*n)/secs, "deliveries/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// subFleet is n subscribers on their own sockets; each counts what it
// receives and when.
type subFleet struct {
	addr, token string
	sse         bool           // event streams (graphql-sse) rather than WebSockets
	conns       []func() error // each subscriber's close
	t0          atomic.Int64   // UnixNano just before the publishing COMMIT
	delivered   atomic.Int64
	want        int64
	mu          sync.Mutex
	lat         []time.Duration
	bad         atomic.Pointer[string]
}

const benchSubscription = `subscription { instanceEvents(tenantId: "bench") { eventId type state } }`

// grow opens sockets until there are n subscribers, 64 handshakes at a time,
// and waits until the server counts them all.
func (f *subFleet) grow(b *testing.B, n int) {
	b.Helper()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start, from := time.Now(), len(f.conns)
	for i := len(f.conns); i < n; i++ {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			dial := f.dial
			if f.sse {
				dial = f.dialSSE
			}
			c, err := dial()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			f.conns = append(f.conns, c)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatalf("%d subscribers open, then: %v", len(f.conns), firstErr)
	}
	b.Logf("%d sockets opened in %v", n-from, time.Since(start).Round(time.Millisecond))
	wait.Eventually(b, 60*time.Second, func() error {
		if got := metric(b, f.addr, "compute_subscriptions"); got < float64(n) {
			return fmt.Errorf("the server counts %v subscriptions, want %d", got, n)
		}
		return nil
	})
}

func (f *subFleet) dial() (func() error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+f.addr+"/graphql", &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		return nil, err
	}
	write := func(v any) error {
		raw, _ := json.Marshal(v)
		return c.Write(ctx, websocket.MessageText, raw)
	}
	if err := write(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + f.token}}); err != nil {
		c.CloseNow()
		return nil, err
	}
	if _, m, err := c.Read(ctx); err != nil || !bytes.Contains(m, []byte(`"connection_ack"`)) {
		c.CloseNow()
		return nil, fmt.Errorf("connection_init: %s %v", m, err)
	}
	if err := write(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": benchSubscription}}); err != nil {
		c.CloseNow()
		return nil, err
	}
	go f.read(c)
	return c.CloseNow, nil
}

// dialSSE opens an event stream of the subscription (GET /graphql/stream)
// on a socket of its own and reads it with the least a client can do: its
// lines.
func (f *subFleet) dialSSE() (func() error, error) {
	c, err := net.DialTimeout("tcp", f.addr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	req := "GET /graphql/stream?query=" + url.QueryEscape(benchSubscription) + " HTTP/1.1\r\nHost: " + f.addr +
		"\r\nAccept: text/event-stream\r\nAuthorization: Bearer " + f.token + "\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	res, err := http.ReadResponse(r, nil)
	if err != nil || res.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("event stream: %v %v", res, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	go func() {
		// The body is chunked: chunk sizes and event lines come as lines;
		// a data line of a next event counts.
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			switch {
			case bytes.HasPrefix(line, []byte("data: {")) && bytes.Contains(line, []byte(`"instanceEvents"`)) && !bytes.Contains(line, []byte(`"errors"`)):
				d := time.Duration(time.Now().UnixNano() - f.t0.Load())
				f.mu.Lock()
				f.lat = append(f.lat, d)
				f.mu.Unlock()
				f.delivered.Add(1)
			case bytes.HasPrefix(line, []byte("data: {")):
				s := string(line)
				f.bad.CompareAndSwap(nil, &s)
			}
		}
	}()
	return c.Close, nil
}

func (f *subFleet) read(c *websocket.Conn) {
	pong := []byte(`{"type":"pong"}`)
	// Each message is read into one buffer of the subscriber's (Read
	// allocates one per message), the least a client can do, as the event
	// streams' subscribers read lines: the subscribers share the server's
	// two cores.
	var buf bytes.Buffer
	for {
		_, r, err := c.Reader(context.Background())
		if err != nil {
			return
		}
		buf.Reset()
		if _, err := buf.ReadFrom(r); err != nil {
			return
		}
		m := buf.Bytes()
		switch {
		case bytes.Contains(m, []byte(`"type":"next"`)) && !bytes.Contains(m, []byte(`"errors"`)):
			d := time.Duration(time.Now().UnixNano() - f.t0.Load())
			f.mu.Lock()
			f.lat = append(f.lat, d)
			f.mu.Unlock()
			f.delivered.Add(1)
		case bytes.Contains(m, []byte(`"type":"ping"`)):
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Write(ctx, websocket.MessageText, pong)
			cancel()
		default:
			s := string(m)
			f.bad.CompareAndSwap(nil, &s)
		}
	}
}

func (f *subFleet) reset() {
	f.mu.Lock()
	f.lat = f.lat[:0]
	f.mu.Unlock()
	f.want = f.delivered.Load()
}

// publish commits events (writers transactions of per events each, at
// once) and waits until every subscriber has every one.
func (f *subFleet) publish(b *testing.B, e *testkit.Env, per, writers int) {
	b.Helper()
	ctx := context.Background()
	txs := make([]interface{ Commit() error }, writers)
	for w := range txs {
		tx, err := e.DB.BeginTxx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for k := 0; k < per; k++ {
			if err := events.Write(ctx, tx, events.Record{Type: events.Running, TenantID: "bench", PoolID: "pool_bench",
				ResourceID: "inst_bench", Data: json.RawMessage(`{"state": "running", "desiredState": "running"}`)}); err != nil {
				b.Fatal(err)
			}
		}
		txs[w] = tx
	}
	f.want += int64(per * writers * len(f.conns))
	f.t0.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	for _, tx := range txs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tx.Commit(); err != nil {
				b.Error(err)
			}
			// Its own transaction, not DB.Tx: tell the sequencer, as
			// DB.Tx does after a commit.
			e.DB.Committed(ctx, []string{"bench"}, -1)
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for f.delivered.Load() < f.want {
		if s := f.bad.Load(); s != nil {
			b.Fatalf("a subscriber received %s", *s)
		}
		if time.Now().After(deadline) {
			b.Fatalf("delivered %d of %d", f.delivered.Load(), f.want)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (f *subFleet) percentiles() (p50, p99 time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.lat) == 0 {
		return 0, 0
	}
	slices.Sort(f.lat)
	return f.lat[len(f.lat)/2], f.lat[len(f.lat)*99/100]
}

func (f *subFleet) close() {
	for _, c := range f.conns {
		_ = c()
	}
}

// cpuProfile keeps 5 seconds of the server's CPU profile.
// procCPU is the CPU time a process has used (user and system, from
// /proc/<pid>/stat).
func procCPU(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

func cpuProfile(path, debug string) {
	res, err := http.Get("http://" + debug + "/debug/pprof/profile?seconds=5")
	if err != nil {
		return
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	_ = os.WriteFile(path, raw, 0o644)
}

type memory struct{ rss, goBytes, stack, goroutines float64 }

var profileSeq atomic.Int64

// serverMemory is the server process's resident set (from /proc) and its Go
// heap and stacks in use (from /metrics) after a garbage collection (the
// pprof listener's heap profile with gc=1 runs one).
func serverMemory(b *testing.B, r *replica, debug string) memory {
	b.Helper()
	time.Sleep(time.Second)
	res, err := http.Get("http://" + debug + "/debug/pprof/heap?gc=1")
	if err != nil {
		b.Fatal(err)
	}
	// BENCH_PROFILE_DIR keeps the server's heap and goroutine profiles of
	// every measurement (go tool pprof reads them).
	if dir := os.Getenv("BENCH_PROFILE_DIR"); dir != "" {
		seqNo := profileSeq.Add(1)
		raw, _ := io.ReadAll(res.Body)
		_ = os.WriteFile(fmt.Sprintf("%s/heap-%d.pb.gz", dir, seqNo), raw, 0o644)
		if g, err := http.Get("http://" + debug + "/debug/pprof/goroutine?debug=1"); err == nil {
			raw, _ := io.ReadAll(g.Body)
			g.Body.Close()
			_ = os.WriteFile(fmt.Sprintf("%s/goroutines-%d.txt", dir, seqNo), raw, 0o644)
		}
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	var m memory
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			m.rss = kb * 1024
		}
	}
	m.goroutines = metric(b, r.addr, "go_goroutines")
	m.stack = metric(b, r.addr, "go_memstats_stack_inuse_bytes")
	m.goBytes = metric(b, r.addr, "go_memstats_heap_inuse_bytes") + m.stack
	return m
}

// metric reads one unlabelled sample from the server's /metrics, with the
// operator token (testkit.OperatorToken) that the public address asks for.
func metric(b testing.TB, addr, name string) float64 {
	b.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testkit.OperatorToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	b.Fatalf("no metric %s", name)
	return 0
}
