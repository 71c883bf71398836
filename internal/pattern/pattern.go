// Package pattern applies the regular expressions of the method index with
// the semantics the index publishes: a JSON Schema "pattern" is an
// ECMA-262 regular expression (with the u flag, as JSON Schema 2020-12
// asks), and a client validates with exactly that. Go's regexp (RE2)
// reads the same source differently where it matters for names: its \s is
// ASCII ([\t\n\f\r ]), where ECMA's also holds \v, NO-BREAK SPACE, the
// other Unicode space separators, LINE and PARAGRAPH SEPARATOR and the BOM;
// and its . matches \r, U+2028 and U+2029, which ECMA's does not. So
// `^\S(?:.*\S)?$` compiled by Go accepted names with a leading NO-BREAK
// SPACE or a LINE SEPARATOR inside: look-alike names passed the
// uniqueness check.
//
// Compile translates an ECMA-262 source into an RE2 one with the same
// meaning and refuses what RE2 cannot express (backreferences,
// lookaround) or what ECMA-262 with the u flag refuses. Every pattern of
// the registry, the JSON Schemas the server validates with (Engine), and
// the graph's checks of the same fields compile through here;
// FuzzMatchesECMA compares the answers with V8's RegExp.
package pattern

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Regexp is a compiled ECMA-262 pattern.
type Regexp struct {
	src string
	re  *regexp.Regexp
}

// String is the ECMA-262 source, as the index publishes it.
func (r *Regexp) String() string { return r.src }

// MatchString says whether s contains a match (the pattern is anchored
// only where it says so, as JSON Schema's pattern keyword).
func (r *Regexp) MatchString(s string) bool { return r.re.MatchString(s) }

// Compile compiles an ECMA-262 pattern.
func Compile(src string) (*Regexp, error) {
	goSrc, err := Translate(src)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(goSrc)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", src, err)
	}
	seenMu.Lock()
	seen[src] = true
	seenMu.Unlock()
	return &Regexp{src: src, re: re}, nil
}

var (
	mu    sync.Mutex
	cache = map[string]*Regexp{}
)

// MustCompile compiles a pattern of the program's own (a bad one is a
// bug), once per source.
func MustCompile(src string) *Regexp {
	mu.Lock()
	defer mu.Unlock()
	if r, ok := cache[src]; ok {
		return r
	}
	r, err := Compile(src)
	if err != nil {
		panic(err)
	}
	cache[src] = r
	return r
}

// whiteSpace is ECMA-262's WhiteSpace and LineTerminator, what \s matches:
// TAB, VT, FF, ZWNBSP (the BOM), every Zs space separator, LF, CR, LINE
// SEPARATOR and PARAGRAPH SEPARATOR.
var whiteSpace = func() []unicode.Range32 {
	set := map[rune]bool{'\t': true, '\v': true, '\f': true, '\ufeff': true, '\n': true, '\r': true, '\u2028': true, '\u2029': true}
	for _, r16 := range unicode.Zs.R16 {
		for c := rune(r16.Lo); c <= rune(r16.Hi); c += rune(r16.Stride) {
			set[c] = true
		}
	}
	for _, r32 := range unicode.Zs.R32 {
		for c := rune(r32.Lo); c <= rune(r32.Hi); c += rune(r32.Stride) {
			set[c] = true
		}
	}
	var out []unicode.Range32
	for c := rune(0); c <= unicode.MaxRune; c++ {
		if !set[c] {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Hi == uint32(c)-1 {
			out[n-1].Hi = uint32(c)
		} else {
			out = append(out, unicode.Range32{Lo: uint32(c), Hi: uint32(c), Stride: 1})
		}
	}
	return out
}()

// ranges renders ranges as the inside of an RE2 class.
func ranges(rs []unicode.Range32) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, `\x{%x}`, r.Lo)
		if r.Hi > r.Lo {
			fmt.Fprintf(&b, `-\x{%x}`, r.Hi)
		}
	}
	return b.String()
}

// complement is every code point outside rs.
func complement(rs []unicode.Range32) []unicode.Range32 {
	var out []unicode.Range32
	next := uint32(0)
	for _, r := range rs {
		if r.Lo > next {
			out = append(out, unicode.Range32{Lo: next, Hi: r.Lo - 1, Stride: 1})
		}
		next = r.Hi + 1
	}
	if next <= unicode.MaxRune {
		out = append(out, unicode.Range32{Lo: next, Hi: unicode.MaxRune, Stride: 1})
	}
	return out
}

var (
	spaceClass    = ranges(whiteSpace)             // \s, inside a class
	nonSpaceClass = ranges(complement(whiteSpace)) // \S, inside a class
	// dot is ECMA's . without the s flag: anything but a line terminator.
	dot = `[^\n\r\x{2028}\x{2029}]`
)

// Translate rewrites an ECMA-262 (u flag) pattern as an RE2 pattern with
// the same meaning.
func Translate(src string) (string, error) {
	t := translator{src: src}
	if err := t.run(); err != nil {
		return "", fmt.Errorf("pattern %q: %w", src, err)
	}
	return t.out.String(), nil
}

type translator struct {
	src    string
	i      int
	out    strings.Builder
	groups int // open groups
}

func (t *translator) peek() (rune, int) {
	if t.i >= len(t.src) {
		return -1, 0
	}
	return utf8.DecodeRuneInString(t.src[t.i:])
}

func (t *translator) run() error {
	if !utf8.ValidString(t.src) {
		return fmt.Errorf("not UTF-8")
	}
	atomEnd := false // the last thing written can take a quantifier
	for t.i < len(t.src) {
		c, n := t.peek()
		switch c {
		case '\\':
			t.i++
			s, err := t.escape(false)
			if err != nil {
				return err
			}
			t.out.WriteString(s)
			atomEnd = s != `\b` && s != `\B`
			continue
		case '.':
			t.out.WriteString(dot)
			atomEnd = true
		case '[':
			t.i++
			if err := t.class(); err != nil {
				return err
			}
			atomEnd = true
			continue
		case '(':
			if err := t.group(); err != nil {
				return err
			}
			atomEnd = false
			continue
		case ')':
			if t.groups == 0 {
				return fmt.Errorf("unmatched )")
			}
			t.groups--
			t.out.WriteByte(')')
			atomEnd = true
		case '*', '+', '?', '{':
			if err := t.repeat(c, atomEnd); err != nil {
				return err
			}
			atomEnd = false
			continue
		case '}', ']':
			return fmt.Errorf("a lone %c (ECMA-262 with the u flag refuses it)", c)
		case '^', '$':
			// Without the m flag both anchor at the ends of the input, as
			// RE2's do without (?m).
			t.out.WriteRune(c)
			atomEnd = false
		case '|':
			t.out.WriteByte('|')
			atomEnd = false
		default:
			t.out.WriteString(regexp.QuoteMeta(string(c)))
			atomEnd = true
		}
		t.i += n
	}
	if t.groups != 0 {
		return fmt.Errorf("unterminated group")
	}
	return nil
}

// group opens a group at t.i ('('): plain, non-capturing or named.
func (t *translator) group() error {
	rest := t.src[t.i+1:]
	switch {
	case strings.HasPrefix(rest, "?:"):
		t.out.WriteString("(?:")
		t.i += 3
	case strings.HasPrefix(rest, "?<") && !strings.HasPrefix(rest, "?<=") && !strings.HasPrefix(rest, "?<!"):
		end := strings.IndexByte(rest, '>')
		name := ""
		if end > 2 {
			name = rest[2:end]
		}
		if !groupName(name) {
			return fmt.Errorf("a group name RE2 cannot hold")
		}
		t.out.WriteString("(?P<" + name + ">")
		t.i += 1 + end + 1
	case strings.HasPrefix(rest, "?"):
		return fmt.Errorf("lookaround and group modifiers are not supported")
	default:
		t.out.WriteString("(")
		t.i++
	}
	t.groups++
	return nil
}

// repeat writes the quantifier at t.i (c is its first character: *, +, ?
// or {), lazy or not; atomEnd says the last thing written can take one.
func (t *translator) repeat(c rune, atomEnd bool) error {
	q := string(c)
	if c == '{' {
		var ok bool
		if q, ok = quantifier(t.src[t.i:]); !ok {
			return fmt.Errorf("a lone { (ECMA-262 with the u flag refuses it)")
		}
	}
	if !atomEnd {
		return fmt.Errorf("nothing to repeat")
	}
	t.out.WriteString(q)
	t.i += len(q)
	if r, _ := t.peek(); r == '?' { // lazy
		t.out.WriteByte('?')
		t.i++
	}
	return nil
}

// quantifier reads {n}, {n,} or {n,m} at the start of s.
func quantifier(s string) (string, bool) {
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return "", false
	}
	body := s[1:end]
	lo, hi, comma := strings.Cut(body, ",")
	if !digits(lo) || comma && hi != "" && !digits(hi) {
		return "", false
	}
	if comma && hi != "" {
		a, _ := strconv.Atoi(lo)
		b, _ := strconv.Atoi(hi)
		if a > b {
			return "", false
		}
	}
	return s[:end+1], true
}

func digits(s string) bool {
	if s == "" || len(s) > 6 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func groupName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// class translates a character class; t.i is past its [.
func (t *translator) class() error {
	var b strings.Builder
	negated := false
	if r, _ := t.peek(); r == '^' {
		negated = true
		t.i++
	}
	items := 0
	// prev is the last single character of the class, for ranges: -1
	// after a class escape (\s, \d), which cannot bound a range.
	prev := rune(-2)
	for {
		c, n := t.peek()
		switch {
		case c < 0:
			return fmt.Errorf("unterminated character class")
		case c == ']':
			t.i += n
			switch {
			case items == 0 && negated: // [^] matches anything
				t.out.WriteString(`[\x{0}-\x{10ffff}]`)
			case items == 0: // [] matches nothing
				t.out.WriteString(`[^\x{0}-\x{10ffff}]`)
			case negated:
				t.out.WriteString("[^" + b.String() + "]")
			default:
				t.out.WriteString("[" + b.String() + "]")
			}
			return nil
		}
		var lit rune = -1
		if c == '\\' {
			t.i++
			e, r, err := t.classEscape()
			if err != nil {
				return err
			}
			b.WriteString(e)
			lit = r
		} else {
			t.i += n
			if c == '-' && prev >= 0 {
				// A range, unless the - is last.
				if r, _ := t.peek(); r != ']' && r >= 0 {
					hi, e, err := t.classAtom()
					if err != nil {
						return err
					}
					if hi < 0 {
						return fmt.Errorf("a range bounded by a class escape")
					}
					if hi < prev {
						return fmt.Errorf("a range out of order")
					}
					b.WriteString("-" + e)
					items++
					prev = -2
					continue
				}
			}
			if c == '-' && prev == -1 {
				if r, _ := t.peek(); r != ']' && r >= 0 {
					return fmt.Errorf("a range bounded by a class escape")
				}
			}
			b.WriteString(classLiteral(c))
			lit = c
		}
		items++
		prev = lit
	}
}

// classAtom reads one class member that bounds a range: its code point
// (-1 for a class escape) and its RE2 text.
func (t *translator) classAtom() (rune, string, error) {
	c, n := t.peek()
	if c == '\\' {
		t.i++
		e, r, err := t.classEscape()
		return r, e, err
	}
	t.i += n
	return c, classLiteral(c), nil
}

func classLiteral(c rune) string {
	switch c {
	case '\\', ']', '[', '^', '-':
		return `\` + string(c)
	}
	return string(c)
}

// classEscape translates an escape inside a class; r is the code point it
// stands for, -1 for a class escape.
func (t *translator) classEscape() (string, rune, error) {
	c, _ := t.peek()
	switch c {
	case 's':
		t.i++
		return spaceClass, -1, nil
	case 'S':
		t.i++
		return nonSpaceClass, -1, nil
	case 'd', 'D', 'w', 'W':
		t.i++
		return `\` + string(c), -1, nil
	case 'b':
		t.i++
		return `\x{8}`, 8, nil
	case '-':
		t.i++
		return `\-`, '-', nil
	}
	s, err := t.escape(true)
	if err != nil {
		return "", 0, err
	}
	r, ok := literalOf(s)
	if !ok {
		return s, -1, nil
	}
	return s, r, nil
}

// literalOf reads back the code point of a translated literal escape.
func literalOf(s string) (rune, bool) {
	if strings.HasPrefix(s, `\x{`) && strings.HasSuffix(s, "}") {
		v, err := strconv.ParseUint(s[3:len(s)-1], 16, 32)
		return rune(v), err == nil
	}
	if strings.HasPrefix(s, `\`) && len(s) == 2 {
		switch s[1] {
		case 't':
			return '\t', true
		case 'n':
			return '\n', true
		case 'r':
			return '\r', true
		case 'f':
			return '\f', true
		case 'v':
			return '\v', true
		}
		return rune(s[1]), true
	}
	return 0, false
}

const syntaxChars = `^$\.*+?()[]{}|/`

// escape translates an escape outside a class (or a literal one inside);
// t.i is past the backslash.
func (t *translator) escape(inClass bool) (string, error) {
	c, n := t.peek()
	if c < 0 {
		return "", fmt.Errorf("a trailing backslash")
	}
	t.i += n
	switch c {
	case 's':
		return "[" + spaceClass + "]", nil
	case 'S':
		return "[" + nonSpaceClass + "]", nil
	case 'd', 'D', 'w', 'W', 'b', 'B':
		return `\` + string(c), nil // ASCII in both (no i flag)
	case 't', 'n', 'r', 'f', 'v':
		return `\` + string(c), nil
	case '0', 'x', 'u', 'c':
		return t.codePointEscape(c)
	case 'p', 'P':
		return "", fmt.Errorf("unicode property escapes are not supported")
	case 'k':
		return "", fmt.Errorf("backreferences are not supported")
	}
	if c >= '1' && c <= '9' {
		return "", fmt.Errorf("backreferences are not supported")
	}
	if strings.ContainsRune(syntaxChars, c) || inClass && c == '-' {
		return regexp.QuoteMeta(string(c)), nil
	}
	return "", fmt.Errorf(`an identity escape \%c (ECMA-262 with the u flag refuses it)`, c)
}

// codePointEscape translates an escape naming one code point (\0, \xHH,
// \uXXXX or \u{X…}, \cX) into RE2's \x{…}; c is its letter, t.i is past it.
func (t *translator) codePointEscape(c rune) (string, error) {
	switch c {
	case '0':
		if r, _ := t.peek(); r >= '0' && r <= '9' {
			return "", fmt.Errorf("an octal escape")
		}
		return `\x{0}`, nil
	case 'x':
		if t.i+2 > len(t.src) {
			return "", fmt.Errorf(`a short \x escape`)
		}
		v, err := strconv.ParseUint(t.src[t.i:t.i+2], 16, 8)
		if err != nil {
			return "", fmt.Errorf(`a bad \x escape`)
		}
		t.i += 2
		return fmt.Sprintf(`\x{%x}`, v), nil
	case 'u':
		r, err := t.unicodeEscape()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf(`\x{%x}`, r), nil
	case 'c':
		r, _ := t.peek()
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return "", fmt.Errorf(`a bad \c escape`)
		}
		t.i++
		return fmt.Sprintf(`\x{%x}`, r%32), nil
	}
	return "", fmt.Errorf("not a code point escape: %c", c)
}

// unicodeEscape reads XXXX or {X…} after \u; a surrogate pair of two
// escapes is one code point (the u flag).
func (t *translator) unicodeEscape() (rune, error) {
	if strings.HasPrefix(t.src[t.i:], "{") {
		end := strings.IndexByte(t.src[t.i:], '}')
		if end < 2 || end > 9 {
			return 0, fmt.Errorf(`a bad \u{} escape`)
		}
		v, err := strconv.ParseUint(t.src[t.i+1:t.i+end], 16, 32)
		if err != nil || v > unicode.MaxRune {
			return 0, fmt.Errorf(`a bad \u{} escape`)
		}
		t.i += end + 1
		return rune(v), nil
	}
	hex4 := func() (rune, bool) {
		if t.i+4 > len(t.src) {
			return 0, false
		}
		v, err := strconv.ParseUint(t.src[t.i:t.i+4], 16, 16)
		if err != nil {
			return 0, false
		}
		t.i += 4
		return rune(v), true
	}
	r, ok := hex4()
	if !ok {
		return 0, fmt.Errorf(`a bad \u escape`)
	}
	if r >= 0xd800 && r < 0xdc00 && strings.HasPrefix(t.src[t.i:], `\u`) {
		save := t.i
		t.i += 2
		if lo, ok := hex4(); ok && lo >= 0xdc00 && lo < 0xe000 {
			return (r-0xd800)<<10 + (lo - 0xdc00) + 0x10000, nil
		}
		t.i = save
	}
	return r, nil
}

// Engine is a jsonschema RegexpEngine (santhosh-tekuri/jsonschema's
// Compiler.UseRegexpEngine): JSON Schemas validate their patterns as the
// registry does.
func Engine(src string) (jsonschema.Regexp, error) {
	r, err := Compile(src)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Sources lists every pattern compiled in this process (for the tests that
// compare them with ECMA-262's reference).
func Sources() []string {
	seenMu.Lock()
	defer seenMu.Unlock()
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

var (
	seenMu sync.Mutex
	seen   = map[string]bool{}
)
