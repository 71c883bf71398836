// Package pgtest starts the one throwaway PostgreSQL cluster of a test
// binary (from the machine's server binaries, fsync off) and gives each test
// a fresh migrated database cloned from a template (pgtestdb). It imports
// nothing of the product but the store and the migrations, so any package,
// internal/instances included, can test against a real database in its own
// package (testkit, which starts the whole server, builds on it).
package pgtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/peterldowns/pgtestdb"
	"github.com/peterldowns/pgtestdb/migrators/goosemigrator"

	"github.com/bettercompute/computed/db"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/pgembed"
	"github.com/bettercompute/computed/internal/store"
)

var (
	once    sync.Once
	cluster *pgembed.Server
	port    int
	root    string
	onceErr error
)

// Main runs a package's tests with the shared cluster and stops it after.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run runs the tests and stops the cluster, returning m.Run's code.
func Run(m *testing.M) int {
	code := m.Run()
	Stop()
	return code
}

// Stop stops the cluster, if it was started, and removes its files.
func Stop() {
	if cluster != nil {
		cluster.Stop()
	}
	if root != "" {
		os.RemoveAll(root)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start() {
	root, onceErr = os.MkdirTemp("", "computed-test-")
	if onceErr != nil {
		return
	}
	// The database user must be able to enter the directory.
	if onceErr = os.Chmod(root, 0o755); onceErr != nil {
		return
	}
	if port, onceErr = freePort(); onceErr != nil {
		return
	}
	cluster, onceErr = pgembed.Start(context.Background(), pgembed.Options{
		Dir: filepath.Join(root, "pg"), SocketDir: filepath.Join(root, "run"), TCPPort: port, Ephemeral: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// Cluster returns the shared cluster, starting it on first use.
func Cluster(t testing.TB) *pgembed.Server {
	t.Helper()
	once.Do(start)
	if onceErr != nil {
		t.Fatalf("start test cluster: %v", onceErr)
	}
	return cluster
}

// Addr is the cluster's TCP address (host:port), starting it on first use.
func Addr(t testing.TB) string {
	t.Helper()
	Cluster(t)
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// DB returns a fresh migrated database for one test, closed at cleanup.
func DB(t testing.TB) *store.DB {
	t.Helper()
	return Open(t, DBURL(t))
}

// DBURL creates a fresh migrated database for one test and returns its URL.
func DBURL(t testing.TB) string {
	t.Helper()
	Cluster(t)
	conf := pgtestdb.Custom(t, pgtestdb.Config{
		DriverName: "pgx", Host: "127.0.0.1", Port: fmt.Sprint(port), User: "compute", Password: "x",
		Database: "postgres", Options: "sslmode=disable", ForceTerminateConnections: true,
	}, goosemigrator.New(".", goosemigrator.WithFS(db.Migrations())))
	return conf.URL()
}

// Open opens url with the store's defaults, closed at cleanup.
func Open(t testing.TB, url string) *store.DB {
	t.Helper()
	d, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	// Every process that writes events numbers them (package events).
	seq := events.Start(d, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(seq.Stop)
	return d
}
