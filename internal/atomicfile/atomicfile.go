// Package atomicfile replaces a small file so that a crash leaves either the old or the
// new content, never a mix or a truncated file: the data goes to a temporary file in the
// same directory, is fsynced, renamed over the target, and the directory is fsynced so
// the rename itself survives a power loss. The broker's JSON tables, the name server's
// KV config, the ACL signature floor and the consumer's local offsets use it.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data (creating its directory, mode 0755, when missing). On
// error the target is unchanged and no temporary file is left behind.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // nothing to remove after the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
