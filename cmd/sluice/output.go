package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/sluicemq/sluice/config"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/remoting"
)

// Exit codes (documented in docs/operations.md): scripts can tell a typo from an outage.
const (
	exitOK          = 0 // done
	exitFailure     = 1 // failed otherwise: refused by a broker, an inconsistent group
	exitUsage       = 2 // bad command line: unknown command or flag, missing or invalid value
	exitNotFound    = 3 // the topic, group or message named does not exist
	exitUnreachable = 4 // a name server or broker cannot be reached, or no broker is registered
	exitPartial     = 5 // some brokers answered, some did not: the output lacks the others' part (named)
)

// usageError marks a command-line mistake (exit code 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// notFoundError marks a name that does not exist (exit code 3).
type notFoundError struct{ err error }

func (e *notFoundError) Error() string { return e.err.Error() }
func (e *notFoundError) Unwrap() error { return e.err }

// exitCode maps a command's error to the process exit code.
func exitCode(err error) int {
	var ue *usageError
	var nf *notFoundError
	var ce *config.Error
	var conn *remoting.ConnError
	var pe *admin.PartialError
	msg := err.Error()
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue), errors.As(err, &ce),
		strings.HasPrefix(msg, "unknown command "), strings.HasPrefix(msg, "unknown flag"), strings.HasPrefix(msg, "unknown shorthand flag"),
		strings.HasPrefix(msg, "required flag(s) "), strings.HasPrefix(msg, "invalid argument "), strings.HasPrefix(msg, "flag needs an argument"):
		return exitUsage
	case errors.As(err, &pe):
		return exitPartial
	case errors.Is(err, admin.ErrNoBroker), errors.As(err, &conn), errors.Is(err, remoting.ErrTimeout):
		return exitUnreachable
	case errors.As(err, &nf), errors.Is(err, admin.ErrTopicNotExist), errors.Is(err, admin.ErrGroupNotExist):
		return exitNotFound
	}
	return exitFailure
}

// subcommandsOnly is the Args of a command that only groups subcommands: an unknown
// word is a usage error with the nearest subcommand names.
func subcommandsOnly(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default for the root
	}
	return &usageError{fmt.Errorf("unknown command %q for %q%s", args[0], cmd.CommandPath(), didYouMean(cmd.SuggestionsFor(args[0])))}
}

// didYouMean formats suggestions as "; did you mean X or Y?" ("" for none).
func didYouMean(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("; did you mean %s?", s[0])
	}
	return fmt.Sprintf("; did you mean %s or %s?", strings.Join(s[:len(s)-1], ", "), s[len(s)-1])
}

// addOutputFlag adds -o/--output (table or json) to cmd's subtree.
func addOutputFlag(cmd *cobra.Command) {
	cmd.PersistentFlags().StringP("output", "o", "table", "output format: table or json")
}

// jsonOutput reports whether the command prints JSON: -o json, or the older --json where a
// command has it. Errors: an -o value other than table or json (a usage error).
func jsonOutput(cmd *cobra.Command) (bool, error) {
	o, _ := cmd.Flags().GetString("output")
	switch o {
	case "table", "":
	case "json":
		return true, nil
	default:
		return false, &usageError{fmt.Errorf("-o %q: want table or json", o)}
	}
	if f := cmd.Flags().Lookup("json"); f != nil {
		j, _ := cmd.Flags().GetBool("json")
		return j, nil
	}
	return false, nil
}

// newTable returns a tabwriter for aligned columns on w.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// showsProgress reports whether a progress bar may be drawn on w: a terminal only (a
// file or pipe would get carriage returns).
func showsProgress(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// noteIncomplete writes one line on the command's stderr naming the brokers that did not
// answer or refused when err is an *admin.PartialError (the command then exits 5), so that a
// script reading stdout gets only the data and a person sees the line under it; other
// errors write nothing. what says what their part means for a table ("what they hold is
// missing above"); under -o json the line points at the document's "partial" instead.
func noteIncomplete(cmd *cobra.Command, err error, what string) {
	var pe *admin.PartialError
	if errors.As(err, &pe) {
		if asJSON, _ := jsonOutput(cmd); asJSON {
			what = `the JSON says "partial": true`
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "INCOMPLETE: %d of %d broker(s) failed (%s); %s\n",
			len(pe.Failed), pe.Answered+len(pe.Failed), strings.Join(pe.FailedBrokers(), ", "), what)
	}
}

// missingAbove is what noteIncomplete says for a read.
const missingAbove = "what they hold is missing above"

// completeness is part of the -o json document of every command that asks several
// brokers: Partial is true when some of them did not answer (or refused), and
// FailedBrokers names those as "name (addr)"; the command then exits 5. A script that
// reads the document alone cannot mistake a partial answer for a whole one.
type completeness struct {
	Partial       bool     `json:"partial"`
	FailedBrokers []string `json:"failedBrokers"` // [] when whole
}

// completenessOf reads err: an *admin.PartialError (possibly joined with others) makes
// the answer partial.
func completenessOf(err error) completeness {
	c := completeness{FailedBrokers: []string{}}
	var pe *admin.PartialError
	if errors.As(err, &pe) {
		c.Partial = true
		if fb := pe.FailedBrokers(); fb != nil {
			c.FailedBrokers = fb
		}
	}
	return c
}
