//go:build !linux

package store

import "errors"

var errNoMmap = errors.New("store: memory-mapped commitlog writes need Linux")

// mapSegment is not available here: the commitlog is written with pwrite.
func mapSegment(*segment) ([]byte, error) { return nil, errNoMmap }

func unmapSegment([]byte) error { return nil }

func releasePages([]byte) error { return nil }
