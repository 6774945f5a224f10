package redismw

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runDedupChild())
	}
	if os.Getenv(stopChildEnv) != "" {
		os.Exit(runStopChild())
	}
	goleak.VerifyTestMain(m)
}
