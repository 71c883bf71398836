// Package jsonnum reads JSON numbers as the product's readers mean them.
package jsonnum

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
)

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
		if !strings.ContainsAny(string(x), ".eE") || len(x) > 400 {
			return x
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
