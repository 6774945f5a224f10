package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// addYesFlag adds --yes to a destructive command (see confirm).
func addYesFlag(cmd *cobra.Command, what string) {
	cmd.Flags().BoolP("yes", "y", false, "do it without asking: "+what)
}

// errNotConfirmed is wrapped when a destructive command was not confirmed (exit code 2).
var errNotConfirmed = errors.New("not confirmed")

// confirm guards a destructive change whose effect is stated in one sentence ("delete
// topic T from …"). With --yes it goes ahead. Without it, on a terminal it asks on stderr
// and reads the answer from stdin (y or yes goes ahead); anywhere else — a script, a
// pipe — it refuses at once, naming the effect and --yes, so that no script deletes by
// accident. A refusal or a "no" changes nothing and is a usage error (exit code 2).
func confirm(cmd *cobra.Command, effect string) error {
	if yes, _ := cmd.Flags().GetBool("yes"); yes {
		return nil
	}
	in := cmd.InOrStdin()
	if !isTerminal(in) {
		return &usageError{fmt.Errorf("this would %s; add --yes to do it (%w: stdin is not a terminal to ask on)", effect, errNotConfirmed)}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "This will %s.\nProceed? [y/N] ", effect)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return &usageError{fmt.Errorf("%w: nothing was changed (answer y to %s, or pass --yes)", errNotConfirmed, effect)}
}

// isTerminal reports whether r is a terminal (an *os.File on a tty).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
