package runner

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// River logs at ERROR when the context of the call it serves ended (a
// request's client went away in the middle of InsertTx); that is the
// caller's end, reported by the caller, and must not read as a failure of
// the server.
func TestRiverRecordsOfAnEndedCallAreNotErrors(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var out bytes.Buffer
		log := slog.New(warnOnly{slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level})})
		live := context.Background()
		ended, cancel := context.WithCancel(live)
		cancel()

		log.ErrorContext(ended, "river: Failed to send job insert notification", "err", "context canceled")
		log.WarnContext(ended, "river: a warning of an ended call")
		log.ErrorContext(live, "river: a real failure")
		log.InfoContext(live, "river: a job's info line")

		got := out.String()
		if !strings.Contains(got, "level=ERROR msg=\"river: a real failure\"") {
			t.Errorf("level %v: an error of a live call must stay an error:\n%s", level, got)
		}
		if strings.Contains(got, "job's info line") {
			t.Errorf("level %v: river's info lines must not pass:\n%s", level, got)
		}
		for _, msg := range []string{"Failed to send job insert notification", "a warning of an ended call"} {
			line := ""
			for _, l := range strings.Split(got, "\n") {
				if strings.Contains(l, msg) {
					line = l
				}
			}
			switch {
			case level == slog.LevelDebug && !strings.Contains(line, "level=DEBUG"):
				t.Errorf("level %v: %q must be kept at debug level, got %q", level, msg, line)
			case level != slog.LevelDebug && line != "":
				t.Errorf("level %v: %q must not be logged, got %q", level, msg, line)
			}
		}
	}
}

// River logs at ERROR when the database is out of reach (stopped, frozen,
// restarting); the server logs an outage at warning level wherever it meets
// it, so river's records of one are warnings too. Other errors stay errors.
func TestRiverRecordsOfAnOutageAreWarnings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var outages []string
	for _, url := range []string{"postgres://compute@127.0.0.1:1/compute?connect_timeout=2", "postgres://compute@/compute?host=/nonexistent-dir"} {
		_, err := pgconn.Connect(ctx, url) // the errors pgx gives, not a copy of them
		if err == nil {
			t.Fatalf("%s: connected", url)
		}
		outages = append(outages, err.Error())
	}
	outages = append(outages, "context deadline exceeded", "FATAL: terminating connection due to administrator command (SQLSTATE 57P01)",
		"ERROR: canceling statement due to statement timeout (SQLSTATE 57014)")
	var out bytes.Buffer
	log := slog.New(warnOnly{slog.NewTextHandler(&out, nil)})
	for _, e := range outages {
		out.Reset()
		log.ErrorContext(ctx, "producer: Error fetching jobs", slog.String("err", e), slog.String("queue", "instances"))
		if !strings.Contains(out.String(), "level=WARN") {
			t.Errorf("%q: %s", e, out.String())
		}
	}
	for _, e := range []string{`ERROR: relation "river_job" does not exist (SQLSTATE 42P01)`, "json: cannot unmarshal number into Go value of type string"} {
		out.Reset()
		log.ErrorContext(ctx, "producer: Error fetching jobs", slog.String("err", e))
		if !strings.Contains(out.String(), "level=ERROR") {
			t.Errorf("%q must stay an error: %s", e, out.String())
		}
	}
}
