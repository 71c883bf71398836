package relay

import "testing"

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
