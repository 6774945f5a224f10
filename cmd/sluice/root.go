package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/lifecycle"
)

// newRootCmd builds the whole command tree. To add a command, write
// cmd_<name>.go with a func new<Name>Cmd() *cobra.Command and add it to the
// AddCommand call below.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Sluice: a RocketMQ-4.x-compatible broker, name server and admin tool",
		SilenceUsage:  true, // runtime errors are not usage errors
		SilenceErrors: true, // main prints the error once
	}
	root.PersistentFlags().String("log-level", "info", "log level: debug, info, warn or error")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} }) // exit code 2
	root.AddCommand(
		newNamesrvCmd(),
		newBrokerCmd(),
		newAdminCmd(),
		newQuickstartCmd(),
		newBenchCmd(),
		newConsoleCmd(),
	)
	return root
}

// newLogger returns a text logger on the command's stderr at the --log-level level.
func newLogger(cmd *cobra.Command) (*slog.Logger, error) {
	lv, _ := cmd.Flags().GetString("log-level")
	var level slog.Level
	if err := level.UnmarshalText([]byte(lv)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", lv)
	}
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})), nil
}

// discardLogger is used by short commands whose output is the result.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// addShutdownFlag adds --shutdown-timeout to a long-running command and marks it as one
// that serves until SIGINT/SIGTERM: main then leaves the signals to the command's
// lifecycle.Group (see newGroup).
func addShutdownFlag(cmd *cobra.Command) {
	cmd.Flags().Duration("shutdown-timeout", 10*time.Second, "how long to wait for in-flight work on SIGINT/SIGTERM")
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[servesUntilSignal] = "true"
}

// servesUntilSignal is the annotation of a command that runs until SIGINT/SIGTERM and
// stops through package lifecycle.
const servesUntilSignal = "sluice/serves-until-signal"

// newGroup returns the lifecycle group a long-running command registers what it started
// with: Run waits for SIGINT/SIGTERM (or the command's context) and stops them stage by
// stage within grace (--shutdown-timeout). Its signal handler is installed at once, so
// a signal that arrives after a server started (and said where it listens) but before
// Run is held for Run's orderly stop instead of killing the process.
func newGroup(grace time.Duration, log *slog.Logger) (*lifecycle.Group, error) {
	g, err := lifecycle.New(lifecycle.Config{Timeout: grace, Logger: log})
	if err != nil {
		return nil, err
	}
	g.HandleSignals()
	return g, nil
}

// shutdownNow shuts c (a lifecycle.Group, or one component) down within grace: the
// clean-up of a long-running command that failed to start.
func shutdownNow(c lifecycle.Component, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return c.Shutdown(ctx)
}

// splitAddrs splits "ip:port;ip:port" (RocketMQ's namesrvAddr form; commas accepted too).
func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		out = append(out, a)
	}
	return out
}
