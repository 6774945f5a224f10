package namesrv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/sluicemq/sluice/internal/atomicfile"
)

// kvFile is the on-disk layout of the KV config (Java KVConfigSerializeWrapper).
type kvFile struct {
	ConfigTable map[string]map[string]string `json:"configTable"`
}

// loadKVFile reads path; a missing file gives an empty table.
func loadKVFile(path string) (map[string]map[string]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return make(map[string]map[string]string), nil
	}
	if err != nil {
		return nil, fmt.Errorf("namesrv: read kv config: %w", err)
	}
	var f kvFile
	if len(b) > 0 {
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("namesrv: kv config %s is not valid JSON: %w", path, err)
		}
	}
	if f.ConfigTable == nil {
		f.ConfigTable = make(map[string]map[string]string)
	}
	for ns, m := range f.ConfigTable {
		if m == nil {
			delete(f.ConfigTable, ns)
		}
	}
	return f.ConfigTable, nil
}

// saveKVFile writes the table to path atomically (temp file in the same directory,
// fsync, rename).
func saveKVFile(path string, table map[string]map[string]string) error {
	b, err := json.MarshalIndent(kvFile{ConfigTable: table}, "", "  ")
	if err != nil {
		return fmt.Errorf("namesrv: encode kv config: %w", err)
	}
	if err := atomicfile.Write(path, b); err != nil {
		return fmt.Errorf("namesrv: write kv config: %w", err)
	}
	return nil
}
