package jsonkeys

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDuplicate(t *testing.T) {
	for _, c := range []struct {
		doc, path string
		dup       bool
	}{
		{`{"query":"a","query":"b"}`, "query", true},
		{`{"query":"a","variables":{"x":1,"y":{"z":[1,{"k":1,"k":2}]}}}`, "variables.y.z[1].k", true},
		{`{"a":1,"\u0061":2}`, "a", true},
		{`{"a":{"b":1},"c":{"b":1}}`, "", false},
		{`[{"a":1},{"a":1}]`, "", false},
		{`{"a":[],"b":{},"c":[{}],"d":null}`, "", false},
		{`{"a":1,"b"`, "", false}, // not JSON: the caller's decoder refuses it
		{`"a"`, "", false},
		{``, "", false},
	} {
		path, dup := Duplicate([]byte(c.doc))
		if dup != c.dup || path != c.path {
			t.Errorf("%s: got %q %v, want %q %v", c.doc, path, dup, c.path, c.dup)
		}
	}
}

// keys counts the key tokens of a document and the keys its objects hold
// once decoded (encoding/json keeps one of equal keys).
func keys(doc []byte) (tokens, held int, ok bool) {
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return 0, 0, false
	}
	var count func(any) int
	count = func(v any) int {
		n := 0
		switch x := v.(type) {
		case map[string]any:
			n += len(x)
			for _, e := range x {
				n += count(e)
			}
		case []any:
			for _, e := range x {
				n += count(e)
			}
		}
		return n
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	type frame struct{ obj, wantKey bool }
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
			} else {
				tokens++
				stack[n-1].wantKey = false
				continue
			}
		} else if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{':
				stack = append(stack, &frame{obj: true, wantKey: true})
				continue
			case '[':
				stack = append(stack, &frame{})
				continue
			default:
				stack = stack[:len(stack)-1]
			}
		}
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true
		}
	}
	return tokens, count(v), true
}

// FuzzDuplicate: for any JSON document, a repeat is reported exactly when
// decoding it loses a key.
func FuzzDuplicate(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":[{"c":1,"c":2}]}}`, `{"a":1,"\u0061":1}`, `[1,{"a":[]}]`, `{}`, `{"a":"\ud800","a":"\ufffd"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		_, dup := Duplicate(doc)
		tokens, held, ok := keys(doc)
		if !ok {
			return
		}
		if dup != (tokens != held) {
			t.Fatalf("%q: duplicate %v, but %d keys written and %d held", doc, dup, tokens, held)
		}
	})
}

// A lone surrogate escape is found wherever it is; pairs, other escapes
// and the same letters outside an escape are not.
func TestLoneSurrogate(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"name":"x\ud800y"}`:           true,
		`{"name":"\udc00"}`:             true,
		`{"name":"\ud800\u0041"}`:       true,
		`{"name":"\ud800"}`:             true,
		`["\uD83D"]`:                    true,
		`{"\ud800":1}`:                  true,
		`{"name":"\ud83d\ude00"}`:       false,
		`{"name":"\uD83D\uDE00"}`:       false,
		`{"name":"\\ud800"}`:            false,
		`{"name":"\\\ud800"}`:           true,
		`{"name":"\u0041\"\ud800"}`:     true,
		`{"name":"ud800"}`:              false,
		`{"name":"\ufffd"}`:             false,
		`{"a":"\"","b":"\ud800\udc00"}`: false,
		`{"n":1}`:                       false,
		`{"name":"x"} "\ud800"`:         true,
	} {
		if got := LoneSurrogate([]byte(doc)); got != want {
			t.Errorf("%s: %v, want %v", doc, got, want)
		}
	}
}

// Whatever the bytes, LoneSurrogate ends; on valid JSON it agrees with
// encoding/json: a document without one decodes to no U+FFFD it did not
// hold.
func FuzzLoneSurrogate(f *testing.F) {
	for _, s := range []string{`{"a":"\ud800"}`, `["\ud83d\ude00"]`, `"\\ud800"`, `{"a":"\u0041"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		lone := LoneSurrogate(doc)
		var v any
		if !utf8.Valid(doc) || json.Unmarshal(doc, &v) != nil || lone {
			return
		}
		if strings.Contains(fmt.Sprint(v), "\ufffd") && !strings.Contains(string(doc), "\ufffd") && !strings.Contains(strings.ToLower(string(doc)), `\ufffd`) {
			t.Fatalf("%q decoded with U+FFFD, and LoneSurrogate said no", doc)
		}
	})
}

// HoldsMore counts objects, arrays and the commas between items and
// members, never what is inside strings (escaped quotes included).
func TestHoldsMore(t *testing.T) {
	for _, c := range []struct {
		doc string
		n   int // what it counts
	}{
		{`1`, 0},
		{`[]`, 1},
		{`[1,2,3]`, 3},
		{`{"a":[1,2],"b":{}}`, 5},
		{`{"a":"x,y,[z]"}`, 1},
		{`{"a":"\",[","b":1}`, 2},
	} {
		if HoldsMore([]byte(c.doc), c.n) || !HoldsMore([]byte(c.doc), c.n-1) && c.n > 0 {
			t.Errorf("%s: want a count of %d", c.doc, c.n)
		}
	}
}
