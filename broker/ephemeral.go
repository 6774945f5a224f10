package broker

import (
	"context"
	"errors"
	"os"
)

// StartEphemeral starts a broker for examples, tests and demos: an embedded name server
// and the broker on free loopback ports ("127.0.0.1:0") over a new temporary data
// directory, unless cfg sets ListenAddr, NamesrvListenAddr or StorePathRootDir. The other
// fields of cfg apply as usual. stop shuts the broker down (bounded by its ctx) and
// removes the temporary directory it created. Errors: creating the directory, and those
// of New and Start (the directory is removed again then).
func StartEphemeral(cfg Config) (b *Broker, stop func(context.Context) error, err error) {
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	if cfg.NamesrvListenAddr == "" && cfg.NamesrvAddr == "" {
		cfg.NamesrvListenAddr = "127.0.0.1:0"
	}
	tmp := ""
	if cfg.StorePathRootDir == "" {
		if tmp, err = os.MkdirTemp("", "sluice-broker-"); err != nil {
			return nil, nil, err
		}
		cfg.StorePathRootDir = tmp
	}
	removeTmp := func() error {
		if tmp == "" {
			return nil
		}
		return os.RemoveAll(tmp)
	}
	if b, err = New(cfg); err == nil {
		err = b.Start()
	}
	if err != nil {
		return nil, nil, errors.Join(err, removeTmp())
	}
	return b, func(ctx context.Context) error { return errors.Join(b.Shutdown(ctx), removeTmp()) }, nil
}
