package outbox_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if code, ok := runChild(); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
