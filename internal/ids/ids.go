// Package ids makes the product's generated identifiers: a prefix and a
// lowercase ULID, matching the seeds' [0-9a-hjkmnp-tv-z]{26,52}.
package ids

import (
	"crypto/rand"
	"encoding/base64"
	"regexp"
	"strings"

	"github.com/oklog/ulid/v2"
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
)

// New returns prefix_<lowercase ULID>.
func New(prefix string) string {
	return prefix + "_" + strings.ToLower(ulid.Make().String())
}

var idBody = `[0-9a-hjkmnp-tv-z]{26,52}`

// Pattern is the regular expression source for ids of a prefix.
func Pattern(prefix string) string { return "^" + prefix + "_" + idBody + "$" }

var cache = map[string]*regexp.Regexp{}

func init() {
	for _, p := range []string{Node, Inventory, Pool, Project, Instance, JoinRequest, JoinToken, Workflow, Event, Token, Principal, Reservation, Audit} {
		cache[p] = regexp.MustCompile(Pattern(p))
	}
}

// Valid reports whether s is a well-formed id of the prefix.
func Valid(prefix, s string) bool {
	re, ok := cache[prefix]
	if !ok {
		re = regexp.MustCompile(Pattern(prefix))
	}
	return re.MatchString(s)
}

// Secret returns a new opaque bearer secret with a readable prefix.
func Secret(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + "_" + base64.RawURLEncoding.EncodeToString(b)
}
