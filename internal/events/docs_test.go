package events_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/bettercompute/computed/internal/events"
)

// TestDocumentedEventIDsAreCurrent reads every event id the docs show
// (the recorded examples, the guides): each must be an id this server
// issues now, not one answered expired-cursor or INVALID_INPUT (the
// instances.events example kept ids of the old outbox after issue 17).
func TestDocumentedEventIDsAreCurrent(t *testing.T) {
	id := regexp.MustCompile(`evt_[0-9a-z]+`)
	var files []string
	if err := filepath.WalkDir("../../docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (filepath.Ext(path) == ".md" || filepath.Ext(path) == ".json") {
			files = append(files, path)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range id.FindAllString(string(b), -1) {
			seen++
			if _, err := events.ParseAnyCursor("cursor", s); err != nil {
				t.Errorf("%s shows %s: %v", f, s, err)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no event id found in the docs")
	}
}
