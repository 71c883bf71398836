// Package pgtext holds the NUL rule, once: PostgreSQL text and jsonb cannot
// hold U+0000, so no string or object key that reaches them may contain it.
// The method decoder, the graph's String scalar and the domain packages'
// checks of free-form objects all ask here.
package pgtext

import (
	"fmt"
	"sort"
	"strings"
)

// HasNUL says whether s holds a NUL character.
func HasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

// FirstNUL returns the path of the first string or key holding a NUL in a
// decoded JSON value, keys in sorted order ("" for none). A key holding
// one is named by path.key.
func FirstNUL(path string, v any) string {
	switch t := v.(type) {
	case string:
		if HasNUL(t) {
			return path
		}
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if HasNUL(k) {
				return path + "." + k
			}
			if p := FirstNUL(path+"."+k, t[k]); p != "" {
				return p
			}
		}
	case []any:
		for i, e := range t {
			if p := FirstNUL(fmt.Sprintf("%s[%d]", path, i), e); p != "" {
				return p
			}
		}
	}
	return ""
}
