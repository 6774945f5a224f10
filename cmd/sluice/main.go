// Command sluice runs a Sluice name server or broker and administers a cluster.
//
//	sluice namesrv --listen 127.0.0.1:9876
//	sluice broker -c broker.conf --data-dir ./store [--namesrv ADDR | --namesrv-listen ADDR]
//	sluice admin topic create --topic T --queues 8 [--order]
//	sluice admin topic list
//	sluice admin topic route --topic T
//
// The long-running commands stop on SIGINT or SIGTERM and shut down within
// --shutdown-timeout.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(exitCode(err)) // output.go; the codes are listed in docs/operations.md
	}
}
