package page

import (
	"encoding/base64"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
)

const kt = Kind("thing")

// A cursor has one spelling: base64's decoder skips CR and LF, so a cursor
// with them inside read as the cursor without them.
func TestDecodeTakesOnlyCanonicalCursors(t *testing.T) {
	c := kt.Encode("acme", 42)
	var s string
	var n int
	if ok, err := kt.Decode(c, &s, &n); !ok || err != nil || s != "acme" || n != 42 {
		t.Fatalf("%q: %v %v %q %d", c, ok, err, s, n)
	}
	for _, bad := range []string{c[:3] + "\n" + c[3:], c + "\r\n"} {
		if _, err := kt.Decode(bad, &s, &n); errs.CodeOf(err) != errs.InvalidInput {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// A cursor is Encode's of what it holds: a part of null read as the first
// page again, and a key holding a NUL reached the database and failed
// there (a probe: "the request breaks a constraint of the data").
func TestDecodeTakesOnlyEncodesCursors(t *testing.T) {
	raw := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	var s string
	var n int
	for _, bad := range []string{raw(`["thing",null,1]`), raw(`["thing","node_\u0000",1]`), raw(`["thing","a", 1e2]`), raw(`["thing", "a",1]`),
		raw(`["thing","a",1.0]`), raw(`["thing","\u0061",1]`), raw(`["a",1]`), raw(`[]`), raw(`[1,"a",1]`), raw(`["thing","a",1,2]`)} {
		if ok, err := kt.Decode(bad, &s, &n); ok || errs.CodeOf(err) != errs.InvalidInput {
			t.Errorf("%q: %v %v", bad, ok, err)
		}
	}
	if ok, err := kt.Decode(raw(`["thing","a",1]`), &s, &n); !ok || err != nil {
		t.Fatal(ok, err)
	}
}

// An int part holds what an integer column holds: a forged profile cursor
// with version 2147483648 reached the statement and failed there as an
// INTERNAL error (a probe); the column's bounds themselves decode.
func TestDecodeKeepsIntPartsInTheirColumn(t *testing.T) {
	raw := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	var s string
	var n int
	for _, bad := range []string{raw(`["thing","a",2147483648]`), raw(`["thing","a",-2147483649]`), raw(`["thing","a",99999999999]`)} {
		if ok, err := kt.Decode(bad, &s, &n); ok || errs.CodeOf(err) != errs.InvalidInput {
			t.Errorf("%q: %v %v", bad, ok, err)
		}
	}
	for _, good := range []int{2147483647, -2147483648} {
		if ok, err := kt.Decode(kt.Encode("a", good), &s, &n); !ok || err != nil || n != good {
			t.Errorf("%d: %v %v %d", good, ok, err, n)
		}
	}
	var big int64
	if ok, err := kt.Decode(raw(`["thing","a",99999999999]`), &s, &big); !ok || err != nil || big != 99999999999 {
		t.Errorf("an int64 part: %v %v %d", ok, err, big)
	}
}

// A list refuses another list's cursor, saying so (it answered an empty
// page: an instance id sorts where no pool id does).
func TestDecodeRefusesAnotherKindsCursor(t *testing.T) {
	var s string
	_, err := Kind("pool").Decode(Kind("instance").Encode("inst_x"), &s)
	if e, ok := errs.As(err); !ok || e.Code != errs.InvalidInput || e.Message != "cursor is one of another list" || e.Details["path"] != "cursor" {
		t.Fatalf("%v", err)
	}
}

// A kind declared with its key's patterns refuses a cursor of its own kind
// whose key this server could not have written (a hand-made
// ["joinRequest", "x' OR 1=1 --"] answered an empty page); a part with no
// pattern takes any text, and other kinds are unchanged.
func TestDecodeRefusesAKeyItsKindCannotHold(t *testing.T) {
	k := Keyed("keyedThing", `^thg_[a-z]{3}$`, "", `^[0-9a-f]{4}$`)
	var id, text, owner string
	if ok, err := k.Decode(k.Encode("thg_abc", "whatever' --", "00ff"), &id, &text, &owner); !ok || err != nil || id != "thg_abc" {
		t.Fatalf("a key it holds: %v %v", ok, err)
	}
	for _, key := range [][]any{{"x' OR 1=1 --", "", "00ff"}, {"thg_abcd", "", "00ff"}, {"thg_abc", "", "00FF"}, {"", "", ""}} {
		_, err := k.Decode(k.Encode(key...), &id, &text, &owner)
		if e, ok := errs.As(err); !ok || e.Code != errs.InvalidInput || e.Message != "cursor is not one this server returned" {
			t.Errorf("%q: %v", key, err)
		}
	}
	// an empty part, which no key this server writes has, on any kind
	if _, err := Kind("plain").Decode(Kind("plain").Encode(""), &id); err == nil {
		t.Error("an empty key was taken")
	}
	defer func() {
		if recover() == nil {
			t.Error("a kind declared twice did not panic")
		}
	}()
	Keyed("keyedThing")
}

// What Decode takes re-encodes to itself.
func FuzzDecode(f *testing.F) {
	f.Add(kt.Encode("acme", 42))
	f.Add(kt.Encode("node_x", -1))
	f.Add("W251bGwsMV0")
	f.Fuzz(func(t *testing.T, c string) {
		var s string
		var n int
		if ok, err := kt.Decode(c, &s, &n); ok && err == nil && kt.Encode(s, n) != c {
			t.Fatalf("%q decoded as %q %d", c, s, n)
		}
	})
}
