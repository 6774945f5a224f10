// Package testfront starts Sluice's gRPC front end for RocketMQ 5 clients in tests, and
// points the official RocketMQ 5 Go client's process-wide settings at it.
package testfront

import (
	"context"
	"os"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/grpcfront"
	"github.com/sluicemq/sluice/internal/testkit"
)

// Start starts a gRPC front end for b on a free 127.0.0.1 port, with cfg's settings
// (Broker, Listen and, when nil, Logger are filled in), and shuts it down when t ends.
func Start(t testing.TB, b *broker.Broker, cfg grpcfront.Config) *grpcfront.Server {
	t.Helper()
	cfg.Broker, cfg.Listen = b, "127.0.0.1:0"
	if cfg.Logger == nil {
		cfg.Logger = testkit.Quiet()
	}
	s, err := grpcfront.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("front end shutdown: %v", err)
		}
	})
	return s
}

// ClientEnv sets the official RocketMQ 5 Go client's process-wide settings for a test
// binary, from TestMain before any client starts (the client reads them without a lock):
// its logs in a new temporary directory instead of $HOME/logs/rocketmq, no console
// output, and plain gRPC (the front end serves no TLS without tlsEnable). The returned
// function removes the directory.
func ClientEnv() (cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "rmq5-client-logs")
	if err != nil {
		return nil, err
	}
	os.Setenv("rocketmq.client.logRoot", dir)
	os.Setenv("mq.consoleAppender.enabled", "false")
	rmq.ResetLogger()
	rmq.EnableSsl = false
	return func() { os.RemoveAll(dir) }, nil
}
