// Package jsonnum reads JSON numbers as the product's readers mean them.
package jsonnum

import (
	"encoding/json"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// MaxDigits bounds the numbers of free-form JSON the server stores (a
// pool's policy, a profile document, anything an open object holds): a
// number has at most this many digits written out in full, its mantissa's
// digits and its exponent's shift together. PostgreSQL keeps a JSON number
// exactly and writes it out in full, so 1e131071 (8 bytes in) came back as
// 131,072 digits on every read of it, and on every read of every tenant a
// public profile holding it reached.
const MaxDigits = 64

// Bounded reports whether a JSON number, as written, has at most MaxDigits
// digits written out in full (1e63 and 1e-62 have; 1e64, 1e400 and
// 0e-99999 have not).
func Bounded(n string) bool {
	s := strings.TrimPrefix(n, "-")
	shift := 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp := strings.TrimLeft(strings.TrimLeft(s[i+1:], "+-"), "0")
		if len(exp) > 4 {
			return false
		}
		if exp != "" {
			shift, _ = strconv.Atoi(exp)
		}
		s = s[:i]
	}
	return len(s)-strings.Count(s, ".")+shift <= MaxDigits
}

// Unbounded finds the first number of a value decoded with json.Number (or
// float64, as gqlparser reads a literal) that Bounded refuses, in key
// order, and returns its path under at.
func Unbounded(at string, v any) (path string, found bool) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if at != "" {
				p = at + "." + k
			}
			if bad, ok := Unbounded(p, x[k]); ok {
				return bad, true
			}
		}
	case []any:
		for i, e := range x {
			if bad, ok := Unbounded(at+"["+strconv.Itoa(i)+"]", e); ok {
				return bad, true
			}
		}
	case json.Number:
		return at, !Bounded(string(x))
	case float64:
		return at, !Bounded(strconv.FormatFloat(x, 'g', -1, 64))
	}
	return "", false
}

// Int reads a JSON number that is an integer however it is written (1,
// 1.0, 1e3, 10e-1), exactly: ok is false for one with a fraction, however
// small (1.5, 1.0000000000000000000001, 1e-400). An integer past int64 is
// the bound on its side (past every field's range).
func Int(n string) (i int64, ok bool) {
	neg := strings.HasPrefix(n, "-")
	s := strings.TrimPrefix(n, "-")
	exp := 0
	if k := strings.IndexAny(s, "eE"); k >= 0 {
		es := s[k+1:]
		s = s[:k]
		eneg := strings.HasPrefix(es, "-")
		es = strings.TrimLeft(strings.TrimLeft(es, "+-"), "0")
		if len(es) > 6 {
			switch {
			case strings.Trim(strings.Replace(s, ".", "", 1), "0") == "":
				return 0, true // zero, however written
			case eneg:
				return 0, false // a fraction
			case neg:
				return math.MinInt64, true
			}
			return math.MaxInt64, true
		}
		if es != "" {
			exp, _ = strconv.Atoi(es)
		}
		if eneg {
			exp = -exp
		}
	}
	whole, frac, _ := strings.Cut(s, ".")
	digits := whole + frac
	point := len(whole) + exp // where the decimal point falls in digits
	if point < len(digits) && strings.Trim(digits[max(point, 0):], "0") != "" {
		return 0, false
	}
	intDigits := strings.TrimLeft(digits[:min(max(point, 0), len(digits))], "0")
	if intDigits != "" && point > len(digits) {
		if point-len(digits) > 19 {
			intDigits = strings.Repeat("9", 20) // past int64 either way
		} else {
			intDigits += strings.Repeat("0", point-len(digits))
		}
	}
	if intDigits == "" {
		return 0, true
	}
	u, err := strconv.ParseUint(intDigits, 10, 64)
	switch {
	case err != nil || !neg && u > math.MaxInt64:
		if neg {
			return math.MinInt64, true
		}
		return math.MaxInt64, true
	case neg && u > 1<<63:
		return math.MinInt64, true
	case neg:
		return -int64(u), true
	}
	return int64(u), true
}

// Integral rewrites, in place, the integral numbers of a value decoded
// with json.Number (1e3, 8.0, 1.0e2) as integers ("1000", "8", "100"),
// where they fit 64 bits; other numbers stay as written. A reader that
// takes an integer (a Go int field, gqlparser's Int) refuses "8.0" and
// "1e3", which JSON and the method surface take as 8 and 1000.
func Integral(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = Integral(e)
		}
	case []any:
		for i, e := range x {
			x[i] = Integral(e)
		}
	case json.Number:
		if !strings.ContainsAny(string(x), ".eE") || len(x) > 400 || !Bounded(string(x)) {
			return x // past the bound it stays as written, for the bound to refuse
		}
		f, _, err := big.ParseFloat(string(x), 10, 256, big.ToNearestEven)
		if err == nil && f.IsInt() {
			if i, acc := f.Int64(); acc == big.Exact {
				return json.Number(strconv.FormatInt(i, 10))
			}
		}
	}
	return v
}
