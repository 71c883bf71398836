package server

import (
	"encoding/json"
	"testing"
)

// encode writes what json.Marshal would, for every message shape the
// server sends.
func TestWSMessageEncode(t *testing.T) {
	for _, m := range []wsMessage{
		{Type: "connection_ack"},
		{Type: "ping"},
		{Type: "pong", Payload: json.RawMessage(`{"x":1}`)},
		{ID: "1", Type: "next", Payload: json.RawMessage(`{"data":{"a":"b"}}`)},
		{ID: "we\"ird\u2028<id>", Type: "error", Payload: json.RawMessage(`[{"message":"m"}]`)},
		{ID: "7", Type: "complete"},
		{ID: "op-1_a.b~c", Type: "next", Payload: json.RawMessage(`{}`)},
		{ID: "a&b", Type: "next"}, {ID: "tab\there", Type: "next"}, {ID: "é", Type: "next"}, {ID: "\x7f", Type: "next"},
	} {
		got, err := m.encode()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(m)
		if string(got) != string(want) {
			t.Errorf("encode %+v = %s, want %s", m, got, want)
		}
	}
}

// frameText's headers at each length encoding's bounds (RFC 6455 5.2).
func TestFrameText(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 127, 65535, 65536, 70000} {
		b := make([]byte, maxFrameHeader+n)
		f := frameText(b, maxFrameHeader)
		var length, header int
		switch {
		case f[1] < 126:
			length, header = int(f[1]), 2
		case f[1] == 126:
			length, header = int(f[2])<<8|int(f[3]), 4
		case f[1] == 127:
			for _, x := range f[2:10] {
				length = length<<8 | int(x)
			}
			header = 10
		}
		if f[0] != 0x81 || f[1]&0x80 != 0 || length != n || len(f) != header+n ||
			(n < 126) != (header == 2) || (n >= 126 && n <= 65535) != (header == 4) {
			t.Errorf("%d bytes: header % x, length %d, frame of %d", n, f[:header], length, len(f))
		}
	}
}
