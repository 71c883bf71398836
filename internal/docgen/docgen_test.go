package docgen

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGeneratedDocsAreCurrent fails when docs/api differs from the registry.
func TestGeneratedDocsAreCurrent(t *testing.T) {
	for path, want := range Files() {
		got, err := os.ReadFile(filepath.Join("..", "..", path))
		if err != nil {
			t.Errorf("%s: %v (run make generate)", path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make generate", path)
		}
	}
}
