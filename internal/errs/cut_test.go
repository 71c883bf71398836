package errs

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// An answer's message is at most MaxMessage characters, whatever it
// quotes: a long run without spaces is cut to a quote, and text of words
// with spaces (a label value, a schema error's value, an input object
// gqlparser wrote out) is cut at the bound, "…" included.
func TestCutTextBoundsEveryMessage(t *testing.T) {
	for _, s := range []string{
		"label value \"" + strings.Repeat("word ", 20000) + "\" must be at most 63 characters",
		strings.Repeat("é", 100000),
		strings.Repeat("a b ", 1000),
	} {
		got := CutText(s)
		if n := utf8.RuneCountInString(got); n > MaxMessage || !strings.Contains(got, "…") {
			t.Errorf("%.40s…: %d characters: %.80s", s, n, got)
		}
	}
	short := "project web already exists in tenant acme"
	if CutText(short) != short {
		t.Errorf("a short message changed: %s", CutText(short))
	}
	exact := strings.Repeat("ab ", MaxMessage/3)
	if CutText(exact) != exact {
		t.Error("a message at the bound changed")
	}
}

// A quoted value is a client's text: a quote of it at most, words or not;
// a path's parts too (a key of words in an unknown field's path).
func TestCutTextQuotesShortly(t *testing.T) {
	words := strings.Repeat("word ", 2000)
	got := CutText(`label value "` + words + `" must be at most 63 characters`)
	if n := utf8.RuneCountInString(got); n > 2*Quoted+40 || !strings.HasSuffix(got, `…" must be at most 63 characters`) {
		t.Errorf("%d characters: %s", n, got)
	}
	p := CutPath("policy.capacity." + words + ".x")
	if n := utf8.RuneCountInString(p); n > Quoted+30 || !strings.HasPrefix(p, "policy.capacity.word word") || !strings.HasSuffix(p, "….x") {
		t.Errorf("%d characters: %s", n, p)
	}
	if CutPath("size.gpus") != "size.gpus" {
		t.Error("a short path changed")
	}
}

// A message that repeats its path has the path's long parts cut where it
// repeats them, as details.path has them cut.
func TestCutMessageCutsThePathItRepeats(t *testing.T) {
	key := strings.Repeat("word ", 2_000)
	path := "policy.capacity." + key
	e := Public(Invalid(path, "%s: unknown field", path), "r")
	if strings.Contains(e.Message, strings.Repeat("word ", 14)) || !strings.HasPrefix(e.Message, "policy.capacity.word") ||
		!strings.HasSuffix(e.Message, "…: unknown field") {
		t.Fatalf("message %d characters: %.200q", len(e.Message), e.Message)
	}
	if p := e.Details["path"].(string); p != "policy.capacity."+Cut(key) {
		t.Fatalf("path %.200q", p)
	}
	if got := CutMessage("a.b: too short to cut", "a.b"); got != "a.b: too short to cut" {
		t.Fatalf("%q", got)
	}
}

// A path of a key of dotted words is cut as a whole: each part is short.
func TestCutPathBoundsADottedKey(t *testing.T) {
	key := strings.Repeat("word word.", 300)
	p := "policy.capacity." + key
	if c := CutPath(p); utf8.RuneCountInString(c) > 2*Quoted || !strings.HasPrefix(c, "policy.capacity.word") {
		t.Fatalf("CutPath: %d characters: %.200q", utf8.RuneCountInString(c), c)
	}
	e := Public(Invalid(p, "%s: unknown field", p), "r")
	if utf8.RuneCountInString(e.Message) > 2*Quoted+len(": unknown field") {
		t.Fatalf("message: %d characters: %.200q", utf8.RuneCountInString(e.Message), e.Message)
	}
	// a message of the path and a colon keeps both, as details.path has it
	short := "policy.sim." + strings.Repeat("a.", 1500)
	e = Public(Invalid(short, "%s: unknown field", short), "r")
	if e.Message != e.Details["path"].(string)+": unknown field" {
		t.Fatalf("message %q, path %q", e.Message, e.Details["path"])
	}
	if c := CutPath("document.hostConfig.sysctl.net.ipv4.conf.all.rp_filter"); c != "document.hostConfig.sysctl.net.ipv4.conf.all.rp_filter" {
		t.Fatalf("a real dotted key: %q", c)
	}
}
