package instances

import (
	"database/sql"
	"io"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"

	"github.com/bettercompute/computed/internal/instances/provider"
	_ "github.com/bettercompute/computed/internal/instances/provider/sim" // the default provider
	"github.com/bettercompute/computed/internal/store"
)

type riverDriver = riverdatabasesql.Driver

// Config tunes the instances service.
type Config struct {
	// ProviderConns is the database connections the sim provider may open
	// (default 8; part of the replica's COMPUTE_DB_MAX_CONNS).
	ProviderConns int
}

// Service is the instances domain: its methods (Create, Start, Stop, ...),
// the reconciler's steps and the provider drivers. Its job queue (the
// river client, whose InsertTx joins the callers' transactions) is wired
// by package runner, which registers the reconciler's worker (AddWorkers)
// and hands the client over (UseQueue) before anything is queued.
type Service struct {
	db        *store.DB
	log       *slog.Logger
	client    *river.Client[*sql.Tx]
	providers map[string]provider.Provider
}

// NewService builds the service; db nil builds one for rendering documents
// only (its handlers are never called).
func NewService(db *store.DB, log *slog.Logger, cfg Config) (*Service, error) {
	if cfg.ProviderConns <= 0 {
		cfg.ProviderConns = 8
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Service{db: db, log: log}
	if db == nil {
		return s, nil
	}
	var err error
	if s.providers, err = provider.Open(provider.Deps{DB: db, MaxConns: cfg.ProviderConns}); err != nil {
		return nil, err
	}
	return s, nil
}

// Close releases the drivers' resources (after the runner's Shutdown).
func (s *Service) Close() {
	for _, p := range s.providers {
		if c, ok := p.(io.Closer); ok {
			_ = c.Close()
		}
	}
}

// --- the seam to the job queue (package runner) -------------------------

// AddWorkers registers the reconciler's worker (Kind, on Queue).
func (s *Service) AddWorkers(w *river.Workers) { river.AddWorker(w, &reconcileWorker{s: s}) }

// UseQueue is the client Enqueue queues through; it is set once, before
// the service takes requests.
func (s *Service) UseQueue(c *river.Client[*sql.Tx]) { s.client = c }

// ReconcileJob is an instance's reconciliation job, as Enqueue queues it
// (the sweep queues many at once).
func ReconcileJob(instanceID string) river.JobArgs { return reconcileArgs{InstanceID: instanceID} }

// Backoff is the wait after the n-th failed try of a step (the queue's
// retry policy waits as long after a failed job run).
func Backoff(n int) time.Duration { return backoff(n) }
