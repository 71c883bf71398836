package e2e

import (
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
