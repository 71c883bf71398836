// Command loadtest is the load benchmark (make loadtest): the real server
// as a separate process and PostGraphile v5 on the same PostgreSQL and the
// same fleet, driven alternately at each concurrency. See
// docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bettercompute/computed/internal/loadtest"
)

func main() {
	cfg := loadtest.Config{Out: os.Stdout}
	conns := flag.String("conns", "8,32", "concurrent connections, comma separated")
	queries := flag.String("queries", "fleet,small", "queries to run: fleet, small")
	serverEnv := flag.String("server-env", "", "extra environment of the server, comma separated (GOGC=200,COMPUTE_DEBUG_ADDR=127.0.0.1:6060)")
	flag.StringVar(&cfg.Dir, "dir", ".loadtest", "cluster, logs and the seeded fleet (kept between runs)")
	flag.StringVar(&cfg.ServerBin, "server", "bin/computed", "the computed binary")
	flag.StringVar(&cfg.PGDir, "postgraphile-dir", "test/postgraphile", "PostGraphile's package (npm ci there first)")
	flag.StringVar(&cfg.Node, "node", "node", "the node binary")
	flag.BoolVar(&cfg.PostGraphile, "postgraphile", true, "compare with PostGraphile v5 on the same database")
	flag.IntVar(&cfg.PGLWorkers, "postgraphile-workers", 0, "PostGraphile's Node.js processes; 0: one per core, the same cores as the server")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "one measured run")
	flag.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "warm-up before each measured run")
	flag.IntVar(&cfg.Rounds, "rounds", 2, "runs of each (query, connections) per server, alternating which goes first")
	flag.IntVar(&cfg.Pools, "pools", 50, "pools in the fleet")
	flag.IntVar(&cfg.PerPool, "nodes", 40, "nodes per pool")
	flag.Parse()
	for _, s := range strings.Split(*conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "-conns: %q is not a positive number\n", s)
			os.Exit(2)
		}
		cfg.Conns = append(cfg.Conns, n)
	}
	for _, q := range strings.Split(*queries, ",") {
		if q = strings.TrimSpace(q); q != "fleet" && q != "small" {
			fmt.Fprintf(os.Stderr, "-queries: %q is neither fleet nor small\n", q)
			os.Exit(2)
		}
		cfg.Queries = append(cfg.Queries, strings.TrimSpace(q))
	}
	if *serverEnv != "" {
		cfg.ServerEnv = strings.Split(*serverEnv, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := loadtest.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}
