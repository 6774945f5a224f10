//go:build !linux

package remoting

import "net"

// rawWriter is Linux-only; elsewhere every frame goes through the connection's writer.
type rawWriter struct{}

func newRawWriter(net.Conn) *rawWriter { return nil }

func (*rawWriter) write([][]byte) (int, error) { return 0, nil }
