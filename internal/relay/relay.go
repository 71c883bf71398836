// Package relay holds Relay's global object ids: an opaque encoding of a
// type name and the object's domain key.
package relay

import (
	"encoding/base64"
	"strings"
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
	t, k, found := strings.Cut(string(b), ":")
	if !found || t == "" || k == "" {
		return "", nil, false
	}
	return t, strings.Split(k, "/"), true
}
