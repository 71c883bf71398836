package relay

import (
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"
)

// A global id has one spelling: base64's decoder skips CR and LF, so an id
// with them inside decoded to the same node as the id without them.
func TestParseTakesOnlyCanonicalIDs(t *testing.T) {
	id := ID("Instance", "acme", "inst_1")
	if typ, key, ok := Parse(id); !ok || typ != "Instance" || len(key) != 2 {
		t.Fatalf("%q: %q %q %v", id, typ, key, ok)
	}
	for _, bad := range []string{id[:4] + "\r" + id[4:], id + "\n", "\r\n" + id} {
		if _, _, ok := Parse(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A key PostgreSQL text cannot hold (a NUL, invalid UTF-8) names no
// object: Parse refuses it, so node(id:) answers null instead of sending
// it to the database to fail there.
func TestParseRefusesKeysTextCannotHold(t *testing.T) {
	for _, raw := range []string{"Pool:\x00", "Instance:acme/inst_\x00x", "ComputeNode:\xff\xfe", "T\x00:x"} {
		if typ, key, ok := Parse(base64.RawURLEncoding.EncodeToString([]byte(raw))); ok {
			t.Errorf("%q parsed: %q %q", raw, typ, key)
		}
	}
}

// What Parse takes is ID's encoding of what it returns, in text
// PostgreSQL can hold.
func FuzzParse(f *testing.F) {
	for _, s := range []string{ID("Instance", "acme", "inst_1"), ID("Pool", "pool_x"), "UG9vbDoA", "eA", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		typ, key, ok := Parse(id)
		if !ok {
			return
		}
		if back := ID(typ, key...); back != id {
			t.Fatalf("%q parsed as %q %q, which encodes as %q", id, typ, key, back)
		}
		for _, s := range append(key, typ) {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("%q: %q taken", id, s)
			}
		}
	})
}
