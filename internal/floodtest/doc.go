// Package floodtest holds an opt-in measurement (flood_test.go): a Sluice broker with
// its default connection limits runs as a child process while connections from 30
// loopback addresses try to take more than its maxConnections (10000); the test reports
// the broker's resident memory before, under and after the flood, and the share of a
// well-behaved client's requests answered meanwhile. It runs only with
// SLUICE_ABUSE_CONNFLOOD set. The package has no non-test code.
package floodtest
