// Command sluice runs a Sluice name server or broker and administers a cluster.
//
//	sluice namesrv --listen 127.0.0.1:9876
//	sluice broker -c broker.conf --data-dir ./store [--namesrv ADDR | --namesrv-listen ADDR]
//	sluice admin topic create --topic T --queues 8 [--order]
//	sluice admin topic list
//	sluice admin topic route --topic T
//
// The long-running commands (namesrv, broker, console) stop on SIGINT or SIGTERM through
// package lifecycle: what they started shuts down in order within --shutdown-timeout,
// and a second signal ends the process at once. Every other command has its context
// cancelled by SIGINT or SIGTERM and cleans up before it exits.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	root := newRootCmd()
	ctx, stop := context.Background(), func() {}
	if cmd, _, err := root.Find(os.Args[1:]); err != nil || cmd.Annotations[servesUntilSignal] == "" {
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	}
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(exitCode(err)) // output.go; the codes are listed in docs/operations.md
	}
}
