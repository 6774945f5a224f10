package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"
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

// addShutdownFlag adds --shutdown-timeout to a long-running command.
func addShutdownFlag(cmd *cobra.Command) {
	cmd.Flags().Duration("shutdown-timeout", 10*time.Second, "how long to wait for in-flight work on SIGINT/SIGTERM")
}

// splitAddrs splits "ip:port;ip:port" (RocketMQ's namesrvAddr form; commas accepted too).
func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		out = append(out, a)
	}
	return out
}
