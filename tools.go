//go:build tools

// Package tools pins the code generators this module uses.
package tools

import _ "github.com/99designs/gqlgen"
