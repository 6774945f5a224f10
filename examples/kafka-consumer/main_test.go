package main

import (
	"context"
	"testing"
	"time"
)

// The example runs to the end on an embedded cluster and miniredis: run returns an
// error when a payment is lost or credited twice, or the dead letter is not re-driven.
func TestExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
}
