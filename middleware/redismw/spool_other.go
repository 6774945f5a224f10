//go:build !unix

package redismw

import "os"

// lockFile does nothing on this platform: there, only one Parker may use a spool path at a
// time, which the caller must ensure.
func lockFile(*os.File) error { return nil }

func unlockFile(*os.File) error { return nil }
