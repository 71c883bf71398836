package jsonnum

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

func decode(t testing.TB, s string) any {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestIntegral(t *testing.T) {
	in := `{"a": 1e3, "b": 8.0, "c": 1.5, "d": [1.0e2, -2E1, 0.25, 7], "e": "1e3", "f": 1e400, "g": 9223372036854775808.0, "h": -0.0}`
	b, _ := json.Marshal(Integral(decode(t, in)))
	if want := `{"a":1000,"b":8,"c":1.5,"d":[100,-20,0.25,7],"e":"1e3","f":1e400,"g":9223372036854775808.0,"h":0}`; string(b) != want {
		t.Fatalf("%s\nwant %s", b, want)
	}
}

// Integral ends on any JSON and keeps what it does not rewrite.
func FuzzIntegral(f *testing.F) {
	f.Add(`{"a": 1e3, "b": [8.0, 1.5]}`)
	f.Add(`1.00000000000000000000001e2`)
	f.Fuzz(func(t *testing.T, s string) {
		dec := json.NewDecoder(bytes.NewReader([]byte(s)))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		if _, err := json.Marshal(Integral(v)); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
	})
}

func TestBounded(t *testing.T) {
	for n, want := range map[string]bool{
		"0": true, "-1.5": true, "18446744073709551617": true, "1e63": true, "1E+63": true, "1e-63": true, "-1e-63": true,
		"1.5e62": true, "1e064": false, "1e64": false, "1e-64": false, "1e400": false, "1e131071": false, "0e-99999": false,
		"1e0000000000000001": true, "1e99999999999999999999": false, "1" + strings.Repeat("0", 63): true,
		"1" + strings.Repeat("0", 64): false, "0." + strings.Repeat("0", 62) + "1": true, "0." + strings.Repeat("0", 63) + "1": false,
	} {
		if got := Bounded(n); got != want {
			t.Errorf("Bounded(%s) = %v, want %v", n, got, want)
		}
	}
	at, bad := Unbounded("policy", decode(t, `{"a": [1, {"b": 2}], "c": {"d": [3, 1e400]}, "e": 1e500}`))
	if !bad || at != "policy.c.d[1]" {
		t.Fatalf("Unbounded: %s %v", at, bad)
	}
	if at, bad := Unbounded("", decode(t, `1e99`)); !bad || at != "" {
		t.Fatalf("a bare number: %q %v", at, bad)
	}
	if _, bad := Unbounded("", decode(t, `{"a": [1e63, -0.5, "1e400"]}`)); bad {
		t.Fatal("bounded numbers refused")
	}
}

// A number Bounded takes is written out by PostgreSQL (numeric: its scale
// the fraction's digits less the exponent) in at most MaxDigits digits.
func FuzzBounded(f *testing.F) {
	for _, s := range []string{"1e63", "-1.5e-62", "0.000001", "123456789012345678901234567890", "1e400", "9e-64", "1.0e+10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := boundedNumber(s)
		if !ok {
			return
		}
		m, exp := strings.TrimPrefix(string(n), "-"), 0
		if i := strings.IndexAny(m, "eE"); i >= 0 {
			e, err := strconv.Atoi(strings.TrimPrefix(m[i+1:], "+"))
			if err != nil {
				t.Fatalf("%s: exponent: %v", s, err)
			}
			m, exp = m[:i], e
		}
		frac := 0
		if _, f, ok := strings.Cut(m, "."); ok {
			frac = len(f)
		}
		r, ok := new(big.Rat).SetString(string(n))
		if !ok {
			t.Fatalf("%s: not a number", s)
		}
		out := r.FloatString(max(0, frac-exp))
		digits := strings.Count(out, "") - 1 - strings.Count(out, "-") - strings.Count(out, ".")
		if strings.HasPrefix(strings.TrimPrefix(out, "-"), "0.") {
			digits-- // the zero before the point
		}
		if digits > MaxDigits {
			t.Fatalf("%s: Bounded, written out as %s (%d digits)", s, out, digits)
		}
	})
}

func TestInt(t *testing.T) {
	type want struct {
		i  int64
		ok bool
	}
	for n, w := range map[string]want{
		"0": {0, true}, "-0": {0, true}, "7": {7, true}, "-7": {-7, true}, "1.0": {1, true}, "1e3": {1000, true}, "10e-1": {1, true},
		"1.500e1": {15, true}, "1.5": {0, false}, "1.0000000000000000000001": {0, false}, "0.99999999999999999999": {0, false},
		"200.00000000000000001": {0, false}, "1e-400": {0, false}, "0e-99999999": {0, true}, "0.0e400": {0, true},
		"9223372036854775807": {math.MaxInt64, true}, "9223372036854775808": {math.MaxInt64, true}, "-9223372036854775808": {math.MinInt64, true},
		"-9223372036854775809": {math.MinInt64, true}, "1e400": {math.MaxInt64, true}, "-1e400": {math.MinInt64, true},
		"1e99999999": {math.MaxInt64, true}, "12345678901234567890123": {math.MaxInt64, true}, "2.5e-1": {0, false}, "25e-1": {0, false},
		"100e-2": {1, true}, "0.000": {0, true},
	} {
		if i, ok := Int(n); i != w.i || ok != w.ok {
			t.Errorf("Int(%s) = %d %v, want %d %v", n, i, ok, w.i, w.ok)
		}
	}
}

// Int agrees with the number's exact value: an integer in int64 is read
// as itself, anything else with a fraction is not an integer.
func FuzzInt(f *testing.F) {
	for _, s := range []string{"1e3", "1.0000000000000000000001", "-9223372036854775808", "25e-1", "1e400", "0.000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := boundedNumber(s)
		if !ok {
			return
		}
		r, ok := new(big.Rat).SetString(string(n))
		if !ok {
			t.Fatalf("%s: not a number", s)
		}
		i, isInt := Int(string(n))
		switch {
		case isInt != r.IsInt():
			t.Fatalf("%s: Int says integer %v, exactly %v", s, isInt, r.IsInt())
		case isInt && r.Num().IsInt64() && i != r.Num().Int64():
			t.Fatalf("%s: Int %d, exactly %s", s, i, r.Num())
		case isInt && !r.Num().IsInt64() && i != math.MaxInt64 && i != math.MinInt64:
			t.Fatalf("%s: Int %d past int64", s, i)
		}
	})
}

// boundedNumber is s when it is one JSON number that Bounded takes.
func boundedNumber(s string) (json.Number, bool) {
	var n json.Number
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if dec.Decode(&n) != nil || dec.More() || !Bounded(string(n)) {
		return "", false
	}
	return n, true
}
