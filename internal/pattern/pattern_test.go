package pattern_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/pattern"
)

// v8 is the reference: V8's RegExp with the u flag, in a Node process fed
// one [pattern, input] pair per line.
type v8 struct {
	mu  sync.Mutex
	in  io.Writer
	out *bufio.Reader
}

const v8Script = `const rl = require('readline').createInterface({input: process.stdin});
rl.on('line', (l) => {
  const [p, s] = JSON.parse(l);
  let r;
  try { r = new RegExp(p, 'u').test(s) ? '1' : '0'; } catch (e) { r = 'E'; }
  process.stdout.write(r + '\n');
});`

var ref struct {
	once sync.Once
	v    *v8
	err  error
}

func reference(t testing.TB) *v8 {
	t.Helper()
	ref.once.Do(func() {
		cmd := exec.Command("node", "-e", v8Script)
		in, err := cmd.StdinPipe()
		if err != nil {
			ref.err = err
			return
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			ref.err = err
			return
		}
		if err := cmd.Start(); err != nil {
			ref.err = fmt.Errorf("node (the ECMA-262 reference) does not start: %w", err)
			return
		}
		ref.v = &v8{in: in, out: bufio.NewReader(out)}
	})
	if ref.err != nil {
		t.Fatal(ref.err)
	}
	return ref.v
}

// test answers "1" (a match), "0" or "E" (V8 refuses the pattern).
func (v *v8) test(t testing.TB, p, s string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	b, _ := json.Marshal([]string{p, s})
	if _, err := v.in.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	line, err := v.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

// patterns are every pattern the server compiles: the registry's fields
// (app.Registry builds every group's methods), the JSON Schemas'
// (compiled at start through pattern.Engine) and the domain's own.
func patterns(t testing.TB) []string {
	app.Registry(nil, nil, nil, nil)
	ps := pattern.Sources()
	if len(ps) < 15 {
		t.Fatalf("only %d patterns compiled: %v", len(ps), ps)
	}
	return ps
}

// Look-alikes: what ECMA-262's \s holds and Go's does not, line
// terminators . must not cross, and characters that are not space.
var tricky = []string{"\u00a0", "\u1680", "\u2000", "\u2007", "\u200a", "\u202f", "\u205f", "\u3000", "\ufeff",
	"\v", "\u2028", "\u2029", "\r", "\n", "\t", "\f", " ", "\u0085", "\u200b", "\u180e", "\u00ad", "é", "😀", "\x00"}

// The published name pattern refuses names that only look alike.
func TestNamesRefuseLookAlikes(t *testing.T) {
	name := pattern.MustCompile(`^\S(?:.*\S)?$`)
	for _, s := range []string{"\u00a0web", "web\u3000", "\ufeffweb", "we\u2028b", "we\u2029b", "we\rb", "web\v", "\u205fweb", "web\u202f"} {
		if name.MatchString(s) {
			t.Errorf("%q matches %s", s, name)
		}
	}
	for _, s := range []string{"web", "w", "web 1", "wé😀b", "web\u0085", "w\u200bb"} {
		if !name.MatchString(s) {
			t.Errorf("%q does not match %s", s, name)
		}
	}
}

// Every pattern the server compiles answers as V8 does, for the
// look-alikes at the start, the end and inside of plausible values.
func TestEveryPatternIsECMA(t *testing.T) {
	v := reference(t)
	for _, p := range patterns(t) {
		if got := v.test(t, p, ""); got == "E" {
			t.Errorf("V8 refuses the pattern %s", p)
			continue
		}
		re := pattern.MustCompile(p)
		for _, base := range []string{"web", "acme", "inst_01jd0000000000000000000000", "a.b-c_d", "0123456789abcdef", "1g.10gb", "https://x/y"} {
			for _, c := range tricky {
				for _, s := range []string{c + base, base + c, base[:1] + c + base[1:], c, base} {
					want := v.test(t, p, s) == "1"
					if re.MatchString(s) != want {
						t.Errorf("%s on %q: %v, V8 says %v", p, s, !want, want)
					}
				}
			}
		}
	}
}

// What RE2 cannot express, or ECMA-262 with the u flag refuses, is
// refused at compile time (the registry panics on start-up).
func TestRefused(t *testing.T) {
	for _, p := range []string{`(a)\1`, `(?=a)`, `(?!a)`, `(?<=a)b`, `(?<!a)b`, `\k<x>`, `a{2,1}`, `{`, `}`, `]`, `\q`, `(?i)a`, `[b-a]`, `[\s-z]`, `\p{L}`, `a**`, `(`, `)`} {
		if _, err := pattern.Compile(p); err == nil {
			t.Errorf("%s compiled", p)
		}
	}
}

// Features the translation handles, against V8.
var features = []string{`^\S(?:.*\S)?$`, `^\S(?:[\s\S]*\S)?$`, `^[^\s]+$`, `^[^\S]+$`, `^[\sa-c]*$`, `^.$`, `^[.]$`, `\u00a0`, `^\u{1F600}$`,
	`^\uD83D\uDE00$`, `^[\x20-\x7E]*$`, `^a|b$`, `^(?<n>x)+$`, `^[\b]$`, `^\cJ$`, `^\0$`, `^[^]$`, `^[]$`, `^a{2,3}?$`, `^\/$`, `^[\]\-\\]+$`,
	`^[a\-z]+$`, `^\d\D\w\W$`, `\bx\b`, `^[\d-]+$`}

// FuzzMatchesECMA compares the translation with V8 on any input, for
// every pattern the server compiles and a set of ECMA-262 features.
func FuzzMatchesECMA(f *testing.F) {
	all := append(patterns(f), features...)
	for i := range all {
		f.Add(uint16(i), "ab"+tricky[i%len(tricky)]) // TestEveryPatternIsECMA tries them all
	}
	f.Fuzz(func(t *testing.T, which uint16, s string) {
		if !utf8.ValidString(s) {
			return // a request's strings are UTF-8 (the decoder sees to it)
		}
		p := all[int(which)%len(all)]
		re, err := pattern.Compile(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		want := reference(t).test(t, p, s)
		if want == "E" {
			t.Fatalf("V8 refuses %s, which compiled", p)
		}
		if re.MatchString(s) != (want == "1") {
			t.Fatalf("%s on %q: %v, V8 says %s", p, s, re.MatchString(s), want)
		}
	})
}
