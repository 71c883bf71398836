// Package ids makes the product's generated identifiers: a prefix and a
// lowercase ULID, matching the seeds' [0-9a-hjkmnp-tv-z]{26,52}.
package ids

import (
	"crypto/rand"
	"encoding/base64"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/bettercompute/computed/internal/pattern"
)

// Prefixes of every generated id.
const (
	Node        = "node"
	Inventory   = "inv"
	Pool        = "pool"
	Project     = "prj"
	Instance    = "inst"
	JoinRequest = "jreq"
	JoinToken   = "jtok"
	Workflow    = "wf"
	Event       = "evt"
	Token       = "tok"
	Principal   = "prn"
	Audit       = "aud"
	Machine     = "mach"
	Reservation = "rsv"
	Challenge   = "chl"
)

// New returns prefix_<lowercase ULID>.
func New(prefix string) string {
	return prefix + "_" + strings.ToLower(ulid.Make().String())
}

var idBody = `[0-9a-hjkmnp-tv-z]{26,52}`

// Pattern is the regular expression source for ids of a prefix.
func Pattern(prefix string) string { return "^" + prefix + "_" + idBody + "$" }

// Valid reports whether s is a well-formed id of the prefix (the
// registry's compiled pattern of such ids).
func Valid(prefix, s string) bool { return pattern.MustCompile(Pattern(prefix)).MatchString(s) }

// Secret returns a new opaque bearer secret with a readable prefix.
func Secret(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + "_" + base64.RawURLEncoding.EncodeToString(b)
}
