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
