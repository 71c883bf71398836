// Command docgen writes the registry's generated documents (run from the
// repository root).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/bettercompute/computed/internal/docgen"
)

func main() {
	files, err := docgen.Files(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for path, b := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
