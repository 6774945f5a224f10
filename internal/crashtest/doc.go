// Package crashtest holds the broker crash test (crash_test.go): a Sluice broker runs as a
// child process with SYNC_FLUSH while producers send to it, is killed with SIGKILL at
// random points, and after every restart on the same data directory each message that
// was answered SEND_OK must be readable with its exact body, and every record the broker
// serves must decode with a valid body CRC. A second test does the same with ASYNC_FLUSH
// (a process crash loses nothing in the page cache) and asynchronous sends, which the
// broker stores in runs read together from a connection. The package has no non-test
// code.
package crashtest
