package db_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/bettercompute/computed/db"
	"github.com/bettercompute/computed/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestConcurrentMigrations: replicas starting at once each run Migrate; the
// session lock makes every migration apply exactly once.
func TestConcurrentMigrations(t *testing.T) {
	c := testkit.Cluster(t)
	admin, err := sql.Open("pgx", c.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(`CREATE DATABASE race`); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(c.AdminURL(), "/postgres?", "/race?", 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d, err := sql.Open("pgx", url)
			if err != nil {
				errs[i] = err
				return
			}
			defer d.Close()
			errs[i] = db.Migrate(context.Background(), d, log)
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	d, _ := sql.Open("pgx", url)
	defer d.Close()
	var applied, files int
	if err := d.QueryRow(`SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	entries, _ := fsReadDir()
	files = entries
	if applied != files {
		t.Fatalf("%d migration rows for %d files", applied, files)
	}
	pending, err := db.Pending(context.Background(), d)
	if err != nil || pending {
		t.Fatalf("pending after migrate: %v %v", pending, err)
	}
}

func fsReadDir() (int, error) {
	es, err := db.Files()
	return len(es), err
}
