package namesrv

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// TestReachesNoBrokerPackage: the name server imports, directly or through other
// packages of this module, no package under broker/ (it shares the ACL validator with
// the broker through the top-level acl package instead of reaching into the broker).
func TestReachesNoBrokerPackage(t *testing.T) {
	const module = "github.com/sluicemq/sluice/"
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{} // import path -> the package that imports it
	queue := []string{module + "broker/namesrv"}
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		pkg, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(path, module)), 0)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			if !strings.HasPrefix(imp, module) || seen[imp] != "" {
				continue
			}
			seen[imp] = path
			if strings.HasPrefix(imp, module+"broker/") && imp != module+"broker/namesrv" {
				t.Errorf("%s imports %s: broker/namesrv must reach no broker package", path, imp)
			}
			queue = append(queue, imp)
		}
	}
	if seen[module+"acl"] == "" {
		t.Errorf("broker/namesrv no longer reaches %sacl: is this check still looking at the right tree?", module)
	}
}
