package tools

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

const prefix = "github.com/outbox-go/outbox"

func internalPath(p string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") }

// workspace parses ../go.work and the go.mod of every module it uses.
func workspace(t *testing.T) (*modfile.WorkFile, map[string]*modfile.File) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	mods := map[string]*modfile.File{}
	for _, u := range work.Use {
		name := filepath.Join(root, u.Path, "go.mod")
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		mods[filepath.Clean(u.Path)] = f
	}
	return work, mods
}

// TestGoModsPublishable holds every go.mod to what a module fetched by a user
// needs: Go ignores replace directives in dependencies and go install refuses
// a module that has one.
func TestGoModsPublishable(t *testing.T) {
	work, mods := workspace(t)
	versions := map[string]bool{}
	for dir, f := range mods {
		for _, r := range f.Replace {
			t.Errorf("%s/go.mod replaces %s: map local folders in go.work instead", dir, r.Old.Path)
		}
		if goVersion(f.Go) != goVersion(work.Go) {
			t.Errorf("%s/go.mod: go %s, want go.work's go %s (one go directive everywhere)", dir, goVersion(f.Go), goVersion(work.Go))
		}
		for _, r := range f.Require {
			if internalPath(r.Mod.Path) {
				versions[r.Mod.Version] = true
			}
		}
	}
	if len(versions) != 1 {
		t.Fatalf("the modules require each other at %v, want one version (make bump-version VERSION=...)", keys(versions))
	}
	var version string
	for v := range versions {
		version = v
	}
	// go.work maps each module at that version to its folder, so that the
	// workspace never looks for the unpublished version.
	mapped := map[string]string{}
	for _, r := range work.Replace {
		if r.Old.Version != version {
			t.Errorf("go.work replaces %s@%s, want @%s", r.Old.Path, r.Old.Version, version)
		}
		mapped[r.Old.Path] = filepath.Clean(r.New.Path)
	}
	for dir, f := range mods {
		if got := mapped[f.Module.Mod.Path]; got != dir {
			t.Errorf("go.work maps %s@%s to %q, want %q", f.Module.Mod.Path, version, got, dir)
		}
	}
}

// TestSharedDependenciesAgree holds every third-party module that more than
// one go.mod requires to one version.
func TestSharedDependenciesAgree(t *testing.T) {
	_, mods := workspace(t)
	seen := map[string]map[string][]string{} // path -> version -> dirs
	for dir, f := range mods {
		for _, r := range f.Require {
			if internalPath(r.Mod.Path) {
				continue
			}
			if seen[r.Mod.Path] == nil {
				seen[r.Mod.Path] = map[string][]string{}
			}
			seen[r.Mod.Path][r.Mod.Version] = append(seen[r.Mod.Path][r.Mod.Version], dir)
		}
	}
	for path, byVersion := range seen {
		if len(byVersion) > 1 {
			t.Errorf("%s is required at more than one version: %v (require the newest everywhere, then make tidy)", path, byVersion)
		}
	}
}

func goVersion(g *modfile.Go) string {
	if g == nil {
		return "(none)"
	}
	return g.Version
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
