package pgembed_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/bettercompute/computed/internal/pgembed"
)

// A start stopped while initdb runs leaves nothing the next start takes
// for a cluster: it left PG_VERSION and no database, and every later
// start waited 60 s for a server that could not start (a probe's
// SIGTERM half a second into a first start).
func TestAStartStoppedDuringInitdbLeavesNoCluster(t *testing.T) {
	if _, err := pgembed.FindBinaries(); err != nil {
		t.Skip(err)
	}
	dir, err := os.MkdirTemp("", "pgembed-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	opts := pgembed.Options{Dir: filepath.Join(dir, "pg"), Ephemeral: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if s, err := pgembed.Start(ctx, opts); err == nil {
		s.Stop() // initdb and the start were faster than the cut: nothing to see
		cancel()
		t.Skip("the start finished before it was stopped")
	}
	cancel()
	s, err := pgembed.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("the start after one stopped during initdb: %v", err)
	}
	defer s.Stop()
	db, err := sql.Open("pgx", s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
}
