package runner

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
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
