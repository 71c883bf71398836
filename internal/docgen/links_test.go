package docgen

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	linkRe   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fenceRe  = regexp.MustCompile("(?ms)^```.*?^```")
	codeRe   = regexp.MustCompile("`[^`\n]*`")
	headRe   = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
	anchorRe = regexp.MustCompile(`<a id="([^"]+)"`)
	slugDrop = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors are the fragment names a Markdown file offers, as GitHub makes
// them from headings (lower case, punctuation dropped, spaces to -, a
// repeated heading numbered) plus explicit <a id>.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	text = fenceRe.ReplaceAllString(text, "")
	for _, m := range headRe.FindAllStringSubmatch(text, -1) {
		h := strings.ReplaceAll(strings.ReplaceAll(m[1], "`", ""), "*", "")
		s := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		a := s
		for i := 1; out[a]; i++ {
			a = s + "-" + strconv.Itoa(i)
		}
		out[a] = true
	}
	for _, m := range anchorRe.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

// TestDocLinksResolve: every relative link in README.md and docs/ names a
// file of the repository (a link starting with / is read from the
// repository's root, as GitHub does) and, for a Markdown file, an anchor it
// has. Links inside code are not links.
func TestDocLinksResolve(t *testing.T) {
	files := []string{filepath.Join(root, "README.md")}
	_ = filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := codeRe.ReplaceAllString(fenceRe.ReplaceAllString(string(b), ""), "")
		for _, m := range linkRe.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			var full string
			switch {
			case path == "":
				full = f
			case strings.HasPrefix(path, "/"):
				full = filepath.Join(root, path)
			default:
				full = filepath.Join(filepath.Dir(f), path)
			}
			checked++
			rel, _ := filepath.Rel(root, f)
			tb, err := os.ReadFile(full)
			if err != nil {
				if st, serr := os.Stat(full); serr == nil && st.IsDir() && frag == "" {
					continue
				}
				t.Errorf("%s: link %s: no such file", rel, target)
				continue
			}
			if frag != "" && strings.HasSuffix(full, ".md") && !anchors(string(tb))[frag] {
				t.Errorf("%s: link %s: no anchor #%s there", rel, target, frag)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d links checked: the walk found too little", checked)
	}
}
