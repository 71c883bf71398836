// Package relay holds Relay's global object ids: an opaque encoding of a
// type name and the object's domain key.
package relay

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"

	"github.com/bettercompute/computed/internal/pgtext"
)

// Node is what the GraphQL Node interface binds to: any object with a
// global id (the executor switches on the concrete type).
type Node interface{}

// ID encodes a global id.
func ID(typeName string, key ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(typeName + ":" + strings.Join(key, "/")))
}

// Parse decodes a global id into its type name and key parts.
func Parse(id string) (typeName string, key []string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || base64.RawURLEncoding.EncodeToString(b) != id { // the decoder skips CR and LF
		return "", nil, false
	}
	// A key PostgreSQL text cannot hold is no object's: answered as an
	// unknown id (null), not sent to the database to fail there.
	if !utf8.Valid(b) || pgtext.HasNUL(string(b)) {
		return "", nil, false
	}
	t, k, found := strings.Cut(string(b), ":")
	if !found || t == "" || k == "" {
		return "", nil, false
	}
	return t, strings.Split(k, "/"), true
}
