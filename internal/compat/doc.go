// Package compat holds compatibility tests between a Sluice broker and the official
// Apache RocketMQ Go client (github.com/apache/rocketmq-client-go/v2, pinned in go.mod),
// in both directions and mixed with Sluice's own producer and push consumer. Each test
// runs an embedded broker and name server on free 127.0.0.1 ports over a temporary
// store. The package has no non-test code.
package compat
