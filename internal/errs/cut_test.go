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
		if n := utf8.RuneCountInString(got); n > MaxMessage || !strings.HasSuffix(got, "…") {
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
