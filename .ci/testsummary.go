//go:build ignore

// testsummary reads `go test -json` events on stdin and prints what plain `go test`
// prints — package result lines with their times, build errors, and the full output of
// failing tests only — then one closing line "tests: N passed, N failed, N skipped"
// (tests and subtests counted alike). It exits 1 when a test or package failed, or
// when the input has no test result at all.
//
//	go test -json ./... | go run .ci/testsummary.go
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output / build-fail events
	Test       string
	Output     string
}

func main() {
	var passed, failed, skipped, pkgFailed int
	pending := map[string][]string{} // package/test → buffered output
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		line := in.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (go vet or build noise): pass it through.
			fmt.Fprintln(out, string(line))
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Action == "build-fail":
			pkgFailed++
		case e.Test == "":
			// Package-level output: "ok  pkg 1.2s", "FAIL", "--- FAIL" summaries, panics.
			if e.Action == "output" && e.Output != "PASS\n" { // plain go test omits PASS of passing packages
				fmt.Fprint(out, e.Output)
			}
			if e.Action == "fail" {
				pkgFailed++
			}
			out.Flush()
		case e.Action == "output":
			if !strings.HasPrefix(e.Output, "=== ") { // RUN/PAUSE/CONT/NAME: -v noise
				pending[key] = append(pending[key], e.Output)
			}
		case e.Action == "pass":
			passed++
			delete(pending, key)
		case e.Action == "skip":
			skipped++
			delete(pending, key)
		case e.Action == "fail":
			failed++
			fmt.Fprint(out, strings.Join(pending[key], ""))
			delete(pending, key)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(out, "testsummary: reading go test -json:", err)
		pkgFailed++
	}
	// Output of tests that never finished (a panic or timeout killed the binary).
	for key, lines := range pending {
		fmt.Fprintf(out, "--- unfinished %s\n%s", strings.ReplaceAll(key, "\x00", " "), strings.Join(lines, ""))
	}
	fmt.Fprintf(out, "tests: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || pkgFailed > 0 || passed+failed == 0 {
		if pkgFailed > 0 {
			fmt.Fprintf(out, "%d package(s) failed\n", pkgFailed)
		}
		out.Flush()
		os.Exit(1)
	}
}
