// Package db holds the versioned schema migrations and applies them.
package db

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var embedded embed.FS

// Migrations is the migration directory as an fs.FS.
func Migrations() fs.FS {
	sub, err := fs.Sub(embedded, "migrations")
	if err != nil {
		panic(err)
	}
	return sub
}

// lockID is the advisory lock replicas take around migrations, so that two
// starting at once apply each migration exactly once.
const lockID = 7_248_301_557

// Migrate applies every pending migration under a PostgreSQL session lock.
func Migrate(ctx context.Context, sqldb *sql.DB, logger *slog.Logger) error {
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, sqldb, Migrations(), goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, r := range results {
		logger.Info("applied migration", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

// Pending reports whether migrations remain to be applied (for /readyz).
func Pending(ctx context.Context, sqldb *sql.DB) (bool, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, sqldb, Migrations())
	if err != nil {
		return false, err
	}
	return p.HasPending(ctx)
}
