//go:build !linux

package store

import (
	"errors"
	"os"
)

var errNoMmap = errors.New("store: memory-mapped writes need Linux")

// mapSegment is not available here: the commitlog is written with pwrite.
func mapSegment(*segment) ([]byte, error) { return nil, errNoMmap }

// mapFile is not available here: consume queues are written with pwrite.
func mapFile(*os.File, int64) ([]byte, error) { return nil, errNoMmap }

func unmapSegment([]byte) error { return nil }

func releasePages([]byte) error { return nil }

const populateSupported = false

func populateWrite([]byte) error { return nil }
