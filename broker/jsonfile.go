package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/sluicemq/sluice/internal/atomicfile"
)

// writeJSONFile writes v as JSON to path atomically: a temp file in the same directory,
// fsync, rename, fsync of the directory. A crash leaves either the old or the new file.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b)
}

// readJSONFile reads path into v; a missing file leaves v untouched and returns nil.
func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
