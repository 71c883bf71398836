package errs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every detail the code sets, and every literal details.reason, is in the
// tables the docs are rendered from (Details, Reasons): a field added
// without its row fails here. Detail values the code takes from a
// variable (a pool's or reservation's state, a TPM challenge's reason
// constant) are named in Reasons by hand.
func TestDetailsDocumented(t *testing.T) {
	keys := map[string]bool{}
	for _, d := range Details() {
		if keys[d.Key] {
			t.Errorf("detail %s listed twice", d.Key)
		}
		keys[d.Key] = true
	}
	reasons := map[string]bool{}
	for _, r := range Reasons() {
		if reasons[r.Value] {
			t.Errorf("reason %s listed twice", r.Value)
		}
		if !Known(r.Code) {
			t.Errorf("reason %s: code %s", r.Value, r.Code)
		}
		reasons[r.Value] = true
	}
	with := regexp.MustCompile(`With\("(\w+)",\s*("([^"]*)")?`)
	assign := regexp.MustCompile(`details\["(\w+)"\]\s*=\s*("([^"]*)")?`)
	constant := regexp.MustCompile(`(?m)^\s*Challenge\w+\s*=\s*"([^"]+)"`)
	// The GraphQL layer's refusals: refusal("reason", message, map[string]any{"key": …}).
	refusal := regexp.MustCompile(`(?s)refusal\("([\w-]+)",.*?map\[string\]any\{([^}]*)\}\)`)
	mapKey := regexp.MustCompile(`"(\w+)":`)
	// Details written as a literal: "details": map[string]any{"reason": …}.
	literal := regexp.MustCompile(`"details":\s*map\[string\]any\{([^}]*)\}`)
	literalReason := regexp.MustCompile(`"reason":\s*"([\w-]+)"`)
	found := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		for _, re := range []*regexp.Regexp{with, assign} {
			for _, m := range re.FindAllStringSubmatch(src, -1) {
				if strings.Contains(m[0], `With("component"`) {
					continue // a slog.Logger's attribute, not an error's detail
				}
				found++
				if !keys[m[1]] {
					t.Errorf("%s: details.%s is in no row of Details", path, m[1])
				}
				if m[1] == "reason" && m[2] != "" && !reasons[m[3]] {
					t.Errorf("%s: details.reason %q is in no row of Reasons", path, m[3])
				}
			}
		}
		for _, m := range refusal.FindAllStringSubmatch(src, -1) {
			found++
			if !reasons[m[1]] {
				t.Errorf("%s: the GraphQL refusal's reason %q is in no row of Reasons", path, m[1])
			}
			for _, k := range mapKey.FindAllStringSubmatch(m[2], -1) {
				if !keys[k[1]] {
					t.Errorf("%s: the GraphQL refusal's details.%s is in no row of Details", path, k[1])
				}
			}
		}
		for _, m := range literal.FindAllStringSubmatch(src, -1) {
			if strings.HasSuffix(path, "registry/render.go") {
				continue // Error.details' own JSON Schema, not an error's details
			}
			found++
			for _, k := range mapKey.FindAllStringSubmatch(m[1], -1) {
				if !keys[k[1]] {
					t.Errorf("%s: details.%s is in no row of Details", path, k[1])
				}
			}
			if r := literalReason.FindStringSubmatch(m[1]); r != nil && !reasons[r[1]] {
				t.Errorf("%s: details.reason %q is in no row of Reasons", path, r[1])
			}
		}
		if strings.HasSuffix(path, "nodes/tpm.go") {
			for _, m := range constant.FindAllStringSubmatch(src, -1) {
				if !reasons[m[1]] {
					t.Errorf("%s: the challenge reason %q is in no row of Reasons", path, m[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 50 {
		t.Fatalf("found %d details in the code: the scan is broken", found)
	}
}
