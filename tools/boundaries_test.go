package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// pkg is the part of `go list -json` the boundaries need.
type pkg struct {
	ImportPath   string
	Standard     bool
	Module       *struct{ Path string }
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string
}

// listPackages runs `go list -json ./...` in every module of the workspace
// (with -deps -test in the core module, whose dependencies are checked) and
// returns the packages by import path.
func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	work, _ := workspace(t)
	all := map[string]pkg{}
	for _, u := range work.Use {
		args := []string{"list", "-json", "./..."}
		if filepath.Clean(u.Path) == "." {
			args = []string{"list", "-deps", "-test", "-json", "./..."}
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = filepath.Join("..", u.Path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v: %s", u.Path, err, stderr.String())
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p pkg
			if err := dec.Decode(&p); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			all[p.ImportPath] = p
		}
	}
	return all
}

func inModule(p pkg, path string) bool { return p.Module != nil && p.Module.Path == path }

// TestImportBoundaries keeps three promises of the module layout:
//   - the core module (the root package, outboxdriver, webhook, cloudevents,
//     admin, drivertest, brokertest and its internal packages) builds on the
//     standard library alone, tests included;
//   - the conformance suites (drivertest, brokertest) import "testing" and are
//     for _test.go files only; the e2e module, a test harness, is the exception;
//   - the SQL engine (internal/sqlstore) is for the drivers, for drivertest
//     (the plans of its statements) and for cmd/outbox and its internal
//     packages (the bench's Truncate and database/sql handle); they reach it
//     under a driver through sqlstore.Of, since no driver exports it.
func TestImportBoundaries(t *testing.T) {
	all := listPackages(t)
	suites := []string{prefix + "/drivertest", prefix + "/brokertest"}
	engine := prefix + "/internal/sqlstore"
	for _, p := range all {
		if p.Module == nil || !internalPath(p.Module.Path) || strings.HasSuffix(p.ImportPath, ".test") {
			continue
		}
		if inModule(p, prefix) {
			for _, d := range p.Deps {
				if dp, ok := all[d]; ok && !dp.Standard && !inModule(dp, prefix) {
					t.Errorf("%s depends on %s: the core module must need the standard library only", p.ImportPath, d)
				}
			}
		}
		if !inModule(p, prefix+"/e2e") && !strings.Contains(p.ImportPath, " [") {
			for _, s := range suites {
				if slices.Contains(p.Imports, s) && !slices.Contains(suites, p.ImportPath) {
					t.Errorf("%s imports the test suite %s outside its _test.go files", p.ImportPath, s)
				}
			}
		}
		imports := slices.Concat(p.Imports, p.TestImports, p.XTestImports)
		if slices.Contains(imports, engine) && !engineUser(p.ImportPath) {
			t.Errorf("%s imports %s, which is for the drivers only", p.ImportPath, engine)
		}
	}
}

func engineUser(path string) bool {
	path, _, _ = strings.Cut(path, " ") // "x [x.test]"
	path = strings.TrimSuffix(path, "_test")
	return strings.HasPrefix(path, prefix+"/driver/") || path == prefix+"/internal/sqlstore" ||
		path == prefix+"/cmd/outbox" || strings.HasPrefix(path, prefix+"/cmd/outbox/internal/") || path == prefix+"/drivertest"
}
