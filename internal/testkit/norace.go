//go:build !race

package testkit

// RaceEnabled reports whether the tests were built with -race.
const RaceEnabled = false
