// Package loadtest is the load benchmark (make loadtest, cmd/loadtest): it
// starts PostgreSQL, the real server as a separate process, seeds a fleet
// through the method surface, and drives the GraphQL endpoint with vegeta
// (as a library) at several concurrencies, alternating with PostGraphile v5
// on the same database, so that the ratio between the two is measured in
// one run. It prints throughput, latency percentiles, CPU per request (each
// server process's own CPU time), and for this server allocations and SQL
// statements per request (from its /metrics).
package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/bettercompute/computed/internal/pgembed"
)

// Config says what to run.
type Config struct {
	Dir          string        // cluster, logs and seed state (kept between runs)
	ServerBin    string        // the computed binary
	PGDir        string        // test/postgraphile (package.json, server.mjs, node_modules)
	Node         string        // the node binary
	Duration     time.Duration // of one measured run
	Warmup       time.Duration // before each measured run, not counted
	Conns        []int
	Queries      []string // fleet, small
	Rounds       int      // every (query, conns) pair runs this often per target, alternating
	PostGraphile bool
	// PGLWorkers is PostGraphile's Node.js processes (0: one per core, as
	// it is deployed, so that both servers get the same cores).
	PGLWorkers int
	Pools      int
	PerPool    int
	ServerEnv  []string // extra environment of the server (GOGC=..., COMPUTE_DEBUG_ADDR=...)
	Out        io.Writer
}

// Queries: the dashboard's fleet query and a small one, for this server
// and the same shape for PostGraphile (its generated names; the latest
// inventory and the GPUs through two SQL functions, see postgraphileSQL).
var queries = map[string][2]string{
	"fleet": {
		`query Fleet($t: String!) { tenant(tenantId: $t) { tenantId name
  pools(first: 50) { totalCount edges { node { poolId name gpuModel sharingMode state
    nodes(first: 40) { totalCount edges { node { nodeId name state labels
      inventory { snapshotId hash collectedAt gpus { uuid index model memoryMiB migMode } } } } } } } } } }`,
		`query Fleet($t: String!) { tenantByTenantId(tenantId: $t) { tenantId name
  poolsByTenantId(first: 50, orderBy: POOL_ID_ASC) { totalCount edges { node { poolId name gpuModel sharingMode state
    computeNodesByPoolId(first: 40, orderBy: NODE_ID_ASC) { totalCount edges { node { nodeId name state labels
      latestInventory { snapshotId hash collectedAt gpus } } } } } } } } }`,
	},
	"small": {
		`query Small($t: String!) { tenant(tenantId: $t) { pools(first: 50) { edges { node { name site } } } } }`,
		`query Small($t: String!) { tenantByTenantId(tenantId: $t) { poolsByTenantId(first: 50, orderBy: POOL_ID_ASC) { edges { node { name site } } } } }`,
	},
}

// postgraphileSQL gives PostGraphile the two relations the schema keeps in
// columns without a foreign key (nodes.latest_snapshot_id) or inside a
// document (the GPUs of a snapshot's sections), as computed columns: what
// a PostGraphile user would write. They live in the benchmark's own cluster
// only.
const postgraphileSQL = `
CREATE OR REPLACE FUNCTION nodes_latest_inventory(n nodes) RETURNS inventory_snapshots
  LANGUAGE sql STABLE AS $$ SELECT * FROM inventory_snapshots s WHERE s.snapshot_id = n.latest_snapshot_id $$;
CREATE OR REPLACE FUNCTION inventory_snapshots_gpus(s inventory_snapshots) RETURNS json
  LANGUAGE sql STABLE AS $$ SELECT s.sections::json -> 'gpus' $$;`

// target is one GraphQL server under load.
type target struct {
	name    string
	url     string
	token   string
	p       *proc
	metrics string // this server's /metrics; empty for PostGraphile
	// operator is the token /metrics asks for on the public address.
	operator string
	queries  int // index into queries' pairs
}

// Result is one measured run.
type Result struct {
	Target, Query string
	Conns         int
	Requests      uint64
	Errors        uint64
	Seconds       float64
	Throughput    float64 // requests per second
	P50, P99      time.Duration
	CPUPerReq     time.Duration // the server process
	DBCPUPerReq   time.Duration // the PostgreSQL processes
	BytesPerReq   float64       // allocated, this server only
	AllocsPerReq  float64
	StmtsPerReq   float64
}

// Run runs the benchmark and prints its tables.
func Run(ctx context.Context, cfg Config) error {
	out := cfg.Out
	logf := func(f string, a ...any) { fmt.Fprintf(out, "# "+f+"\n", a...) }
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	dir, _ := filepath.Abs(cfg.Dir)
	pgPort, err := freePort()
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pg, err := pgembed.Start(ctx, pgembed.Options{Dir: filepath.Join(dir, "pg"), SocketDir: filepath.Join(dir, "run"), TCPPort: pgPort, Ephemeral: true, Logger: quiet})
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pg.Stop()
	dbURL := pg.URL()

	operator := readOrMakeSecret(filepath.Join(dir, "operator-token"))
	port, _ := freePort()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	env := append([]string{"DATABASE_URL=" + dbURL, "COMPUTE_ADDR=127.0.0.1:" + strconv.Itoa(port),
		"COMPUTE_BOOTSTRAP_TOKEN=" + operator, "COMPUTE_RATE_LIMIT=0", "COMPUTE_DATA_DIR=" + filepath.Join(dir, "data")}, cfg.ServerEnv...)
	srv, err := start("computed", filepath.Join(dir, "computed.log"), "", cfg.ServerBin, []string{"serve"}, env)
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := srv.waitHTTP(ctx, base+"/readyz", ""); err != nil {
		return err
	}
	c := &client{base: base, http: &http.Client{Timeout: 60 * time.Second}}
	st, err := seeded(ctx, cfg, c, dir, dbURL, operator, logf)
	if err != nil {
		return err
	}
	targets := []*target{{name: "computed", url: base + "/graphql", token: st.Admin, p: srv, metrics: base + "/metrics", operator: operator}}

	if cfg.PostGraphile {
		gp, err := startPostGraphile(ctx, cfg, dir, dbURL)
		if err != nil {
			return err
		}
		defer gp.p.stop()
		targets = append(targets, gp)
	}

	// Both servers must answer the same fleet before anything is timed.
	for _, t := range targets {
		for _, q := range cfg.Queries {
			if err := check(ctx, t, q, st); err != nil {
				return err
			}
		}
	}
	logf("machine: %d CPUs; load average before: %s", numCPU(), loadavg())
	if cfg.PostGraphile {
		logf("postgraphile: %d Node.js workers (computed: GOMAXPROCS %d)", pglWorkers(cfg), runtime.NumCPU())
	}

	results, err := measureAll(ctx, cfg, targets, st, pg)
	if err != nil {
		return err
	}
	logf("load average after: %s", loadavg())
	for _, t := range targets {
		logf("%s: peak resident memory %d MB", t.name, t.p.peakRSS()>>20)
	}
	summarize(out, cfg, results)
	return nil
}

// seeded returns the fleet kept in dir, seeding it through the method
// surface the first time.
func seeded(ctx context.Context, cfg Config, c *client, dir, dbURL, operator string, logf func(string, ...any)) (*seedState, error) {
	statePath := filepath.Join(dir, "seed.json")
	st, err := readSeed(statePath)
	if err == nil && (st.Pools != cfg.Pools || st.PerPool != cfg.PerPool) {
		return nil, fmt.Errorf("%s holds a fleet of %d x %d; remove %s for %d x %d", dir, st.Pools, st.PerPool, dir, cfg.Pools, cfg.PerPool)
	}
	if err == nil {
		return st, nil
	}
	logf("seeding %d pools x %d nodes through the method surface (once; kept in %s)", cfg.Pools, cfg.PerPool, dir)
	t0 := time.Now()
	if st, err = seed(ctx, c, operator, cfg.Pools, cfg.PerPool, logf); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	b, _ := json.Marshal(st)
	if err := os.WriteFile(statePath, b, 0o600); err != nil {
		return nil, err
	}
	logf("seeded in %.0f s", time.Since(t0).Seconds())
	return st, analyze(ctx, dbURL)
}

// startPostGraphile starts the comparison server on the same database;
// the caller stops its process.
func startPostGraphile(ctx context.Context, cfg Config, dir, dbURL string) (*target, error) {
	if err := execSQL(ctx, dbURL, postgraphileSQL); err != nil {
		return nil, fmt.Errorf("postgraphile functions: %w", err)
	}
	gport, _ := freePort()
	gp, err := start("postgraphile", filepath.Join(dir, "postgraphile.log"), cfg.PGDir, cfg.Node, []string{"server.mjs"},
		[]string{"DATABASE_URL=" + dbURL, "PORT=" + strconv.Itoa(gport), "NODE_ENV=production", "PGL_WORKERS=" + strconv.Itoa(pglWorkers(cfg))})
	if err != nil {
		return nil, err
	}
	gurl := fmt.Sprintf("http://127.0.0.1:%d/graphql", gport)
	if err := gp.waitHTTP(ctx, gurl, `{"query":"{ __typename }"}`); err != nil {
		gp.stop()
		return nil, err
	}
	return &target{name: "postgraphile", url: gurl, p: gp, queries: 1}, nil
}

// measureAll measures every query at every connection count, round after
// round, alternating the servers' order, and prints each run.
func measureAll(ctx context.Context, cfg Config, targets []*target, st *seedState, pg *pgembed.Server) ([]Result, error) {
	var results []Result
	for round := 0; round < cfg.Rounds; round++ {
		for _, q := range cfg.Queries {
			for _, conns := range cfg.Conns {
				order := targets
				if round%2 == 1 && len(targets) == 2 {
					order = []*target{targets[1], targets[0]}
				}
				for _, t := range order {
					r, err := measure(ctx, cfg, t, q, conns, st, pg)
					if err != nil {
						return nil, err
					}
					results = append(results, r)
					printRun(cfg.Out, r)
				}
			}
		}
	}
	return results, nil
}

func body(t *target, q string, st *seedState) []byte {
	b, _ := json.Marshal(map[string]any{"query": queries[q][t.queries], "variables": map[string]any{"t": st.Tenant}})
	return b
}

func header(t *target) http.Header {
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/graphql-response+json, application/json"}}
	if t.token != "" {
		h.Set("Authorization", "Bearer "+t.token)
	}
	return h
}

// check runs q once against t and verifies the answer's shape: every pool,
// every node, and 8 GPUs per node.
func check(ctx context.Context, t *target, q string, st *seedState) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body(t, q, st)))
	req.Header = header(t)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r struct {
		Data   map[string]map[string]json.RawMessage `json:"data"`
		Errors []any                                 `json:"errors"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Errors) > 0 || resp.StatusCode != 200 {
		return fmt.Errorf("%s %s: %d %.1000s", t.name, q, resp.StatusCode, raw)
	}
	s := string(raw)
	pools := strings.Count(s, `"poolId"`) + strings.Count(s, `"site"`)
	nodes := strings.Count(s, `"nodeId"`)
	gpus := strings.Count(s, `"uuid"`)
	want := st.Pools
	if pools != want || (q == "fleet" && (nodes != st.Pools*st.PerPool || gpus != 8*nodes)) {
		return fmt.Errorf("%s %s: %d pools, %d nodes, %d GPUs; want %d pools of %d nodes with 8 GPUs", t.name, q, pools, nodes, gpus, want, st.PerPool)
	}
	return nil
}

// measure drives t with q at conns concurrent connections: warm-up, then
// a measured run, each a closed loop (every worker sends its next request
// when the last one is answered).
func measure(ctx context.Context, cfg Config, t *target, q string, conns int, st *seedState, pg *pgembed.Server) (Result, error) {
	tr := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodPost, URL: t.url, Body: body(t, q, st), Header: header(t)})
	attacker := func() *vegeta.Attacker {
		return vegeta.NewAttacker(vegeta.Connections(conns), vegeta.MaxConnections(conns), vegeta.Workers(uint64(conns)),
			vegeta.MaxWorkers(uint64(conns)), vegeta.KeepAlive(true), vegeta.Timeout(60*time.Second), vegeta.HTTP2(false))
	}
	// The warm-up also opens the connections.
	if cfg.Warmup > 0 {
		for res := range attacker().Attack(tr, vegeta.Rate{}, cfg.Warmup, "warmup") {
			_ = res
		}
	}
	before := scrape(t)
	cpu0, db0 := t.p.cpu(), postgresCPU(filepath.Join(cfg.Dir, "pg"))
	t0 := time.Now()
	var m vegeta.Metrics
	var errCount uint64
	var firstErr string
	for res := range attacker().Attack(tr, vegeta.Rate{}, cfg.Duration, q) {
		if res.Code != 200 || !bytes.HasPrefix(res.Body, []byte(`{"data"`)) {
			errCount++
			if firstErr == "" {
				firstErr = fmt.Sprintf("%d %s %.300s", res.Code, res.Error, res.Body)
			}
		}
		res.Body = nil
		m.Add(res)
	}
	elapsed := time.Since(t0)
	cpu1, db1 := t.p.cpu(), postgresCPU(filepath.Join(cfg.Dir, "pg"))
	after := scrape(t)
	m.Close()
	if errCount > 0 {
		fmt.Fprintf(cfg.Out, "# %s %s: %d failed requests, the first: %s\n", t.name, q, errCount, firstErr)
	}
	// Throughput counts answers with data; CPU and memory are shared by
	// every request sent.
	n := float64(m.Requests)
	r := Result{Target: t.name, Query: q, Conns: conns, Requests: m.Requests, Errors: errCount, Seconds: elapsed.Seconds(),
		Throughput: float64(m.Requests-errCount) / elapsed.Seconds(), P50: m.Latencies.P50, P99: m.Latencies.P99,
		CPUPerReq: time.Duration(float64(cpu1-cpu0) / n), DBCPUPerReq: time.Duration(float64(db1-db0) / n)}
	if before != nil && after != nil {
		r.BytesPerReq = (after["go_memstats_alloc_bytes_total"] - before["go_memstats_alloc_bytes_total"]) / n
		r.AllocsPerReq = (after["go_memstats_mallocs_total"] - before["go_memstats_mallocs_total"]) / n
		r.StmtsPerReq = (after["compute_sql_request_statements_total"] - before["compute_sql_request_statements_total"]) / n
	}
	return r, nil
}

// scrape reads the counters this server exposes on /metrics.
func scrape(t *target) map[string]float64 {
	if t.metrics == "" {
		return nil
	}
	req, _ := http.NewRequest(http.MethodGet, t.metrics, nil)
	req.Header.Set("Authorization", "Bearer "+t.operator)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		switch name {
		case "go_memstats_alloc_bytes_total", "go_memstats_mallocs_total", "compute_sql_request_statements_total":
			out[name], _ = strconv.ParseFloat(val, 64)
		}
	}
	return out
}

func printRun(out io.Writer, r Result) {
	extra := ""
	if r.Target == "computed" {
		extra = fmt.Sprintf("  %6.1f MB/req %8.0f allocs/req %4.2f stmts/req", r.BytesPerReq/1e6, r.AllocsPerReq, r.StmtsPerReq)
	}
	fmt.Fprintf(out, "%-12s %-5s c=%-3d %6d req %5.1f s %8.1f req/s  p50 %8s  p99 %8s  cpu %8s/req  db %8s/req%s\n",
		r.Target, r.Query, r.Conns, r.Requests, r.Seconds, r.Throughput, round(r.P50), round(r.P99), round(r.CPUPerReq), round(r.DBCPUPerReq), extra)
}

func round(d time.Duration) time.Duration {
	switch {
	case d > 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// summarize pools the rounds of each (query, conns, target): requests and
// CPU summed over the rounds, latencies as the median of the rounds'.
func summarize(out io.Writer, cfg Config, rs []Result) {
	type key struct {
		q      string
		c      int
		target string
	}
	agg := map[key]*Result{}
	p50s, p99s := map[key][]time.Duration{}, map[key][]time.Duration{}
	var keys []key
	for _, r := range rs {
		k := key{r.Query, r.Conns, r.Target}
		a := agg[k]
		if a == nil {
			a = &Result{Target: r.Target, Query: r.Query, Conns: r.Conns}
			agg[k] = a
			keys = append(keys, k)
		}
		n := float64(r.Requests)
		a.Requests += r.Requests
		a.Errors += r.Errors
		a.Seconds += r.Seconds
		a.CPUPerReq += time.Duration(float64(r.CPUPerReq) * n)
		a.DBCPUPerReq += time.Duration(float64(r.DBCPUPerReq) * n)
		a.BytesPerReq += r.BytesPerReq * n
		a.AllocsPerReq += r.AllocsPerReq * n
		a.StmtsPerReq += r.StmtsPerReq * n
		p50s[k], p99s[k] = append(p50s[k], r.P50), append(p99s[k], r.P99)
	}
	fmt.Fprintf(out, "\nsummary: %d round(s) of %s per row, targets alternating\n", cfg.Rounds, cfg.Duration)
	fmt.Fprintln(out, "| query | conns | server | req/s | vs PostGraphile | p50 | p99 | CPU/req | DB CPU/req | MB/req | allocs/req | statements/req |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range keys {
		a := agg[k]
		n := float64(a.Requests)
		a.Throughput = float64(a.Requests-a.Errors) / a.Seconds
		a.CPUPerReq = time.Duration(float64(a.CPUPerReq) / n)
		a.DBCPUPerReq = time.Duration(float64(a.DBCPUPerReq) / n)
		ratio := "–"
		if k.target == "computed" {
			if g := agg[key{k.q, k.c, "postgraphile"}]; g != nil && g.Requests > g.Errors {
				ratio = fmt.Sprintf("%.2f×", a.Throughput/(float64(g.Requests-g.Errors)/g.Seconds))
			}
		}
		mem := "– | – | –"
		if k.target == "computed" {
			mem = fmt.Sprintf("%.1f | %.0f | %.2f", a.BytesPerReq/n/1e6, a.AllocsPerReq/n, a.StmtsPerReq/n)
		}
		errNote := ""
		if a.Errors > 0 {
			errNote = fmt.Sprintf(" (%d errors)", a.Errors)
		}
		fmt.Fprintf(out, "| %s | %d | %s%s | %.1f | %s | %s | %s | %s | %s | %s |\n", k.q, k.c, k.target, errNote, a.Throughput, ratio,
			round(median(p50s[k])), round(median(p99s[k])), round(a.CPUPerReq), round(a.DBCPUPerReq), mem)
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func readOrMakeSecret(path string) string {
	if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
		return string(bytes.TrimSpace(b))
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	s := "bco_loadtest_" + hex.EncodeToString(b)
	_ = os.WriteFile(path, []byte(s+"\n"), 0o600)
	return s
}

func execSQL(ctx context.Context, url, stmt string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// analyze refreshes the planner's statistics after the seed, as autovacuum
// would in a while.
func analyze(ctx context.Context, url string) error { return execSQL(ctx, url, "VACUUM ANALYZE") }

func numCPU() int { return runtime.NumCPU() }

// pglWorkers is PostGraphile's process count: one per core unless set.
func pglWorkers(cfg Config) int {
	if cfg.PGLWorkers > 0 {
		return cfg.PGLWorkers
	}
	return runtime.NumCPU()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
