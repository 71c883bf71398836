package jsonnum

import (
	"bytes"
	"encoding/json"
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
