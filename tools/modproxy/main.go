// Command modproxy lays out the repository's modules as a file-based Go
// module proxy (GOPROXY=file://DIR), so that a build outside the repository
// can fetch them at a version that was never tagged.
//
//	modproxy -out DIR -version VERSION MODULE_DIR...
//
// Each module is served as DIR/<module>/@v/<version>.{info,mod,zip} plus a
// list file. A require of another module given on the command line is set to
// VERSION in the served go.mod (and in the zip's go.mod), as `make
// bump-version` would do before a release. The files of a module are those git
// tracks or would track (git ls-files -co --exclude-standard), minus nested
// modules; a go.mod with a replace directive is refused, since Go refuses to
// install a module whose go.mod has one.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func main() {
	out := flag.String("out", "", "the proxy's root folder (created if missing)")
	version := flag.String("version", "", "the version to serve every module at, e.g. v0.1.0")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: modproxy -out DIR -version VERSION MODULE_DIR...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*out, *version, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// mod is one module to serve: its folder and its parsed go.mod.
type mod struct {
	dir  string
	file *modfile.File
}

func run(out, version string, dirs []string) error {
	if out == "" || len(dirs) == 0 {
		return errors.New("need -out and at least one module folder")
	}
	if err := module.Check("example.com/m", version); err != nil {
		return fmt.Errorf("-version %q is not a module version (want e.g. v0.1.0): %w", version, err)
	}
	mods := make([]mod, 0, len(dirs))
	internal := map[string]bool{}
	for _, dir := range dirs {
		f, err := parseGoMod(dir)
		if err != nil {
			return err
		}
		mods = append(mods, mod{dir: dir, file: f})
		internal[f.Module.Mod.Path] = true
	}
	for _, m := range mods {
		if err := serve(out, version, m, internal); err != nil {
			return fmt.Errorf("%s: %w", m.file.Module.Mod.Path, err)
		}
	}
	return nil
}

func parseGoMod(dir string) (*modfile.File, error) {
	name := filepath.Join(dir, "go.mod")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil {
		return nil, fmt.Errorf("%s has no module line", name)
	}
	if len(f.Replace) > 0 {
		return nil, fmt.Errorf("%s has a replace directive (%s); a published module must not: map local folders in go.work instead",
			name, f.Replace[0].Old.Path)
	}
	return f, nil
}

// serve writes one module's .info, .mod, .zip and list entry.
func serve(out, version string, m mod, internal map[string]bool) error {
	for _, r := range m.file.Require {
		if internal[r.Mod.Path] {
			if err := m.file.AddRequire(r.Mod.Path, version); err != nil {
				return err
			}
		}
	}
	m.file.Cleanup()
	gomod, err := m.file.Format()
	if err != nil {
		return err
	}
	path := m.file.Module.Mod.Path
	escaped, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o750); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".info"), info, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".mod"), gomod, 0o600); err != nil {
		return err
	}
	if err := writeZip(filepath.Join(vdir, version+".zip"), module.Version{Path: path, Version: version}, m.dir, gomod); err != nil {
		return err
	}
	return appendList(filepath.Join(vdir, "list"), version)
}

func writeZip(name string, mv module.Version, dir string, gomod []byte) (err error) {
	files, err := listFiles(dir, gomod)
	if err != nil {
		return err
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return modzip.Create(f, mv, files)
}

// listFiles returns the module's files as git sees them; modzip.Create drops
// the files of nested modules. The go.mod served is the rewritten one.
func listFiles(dir string, gomod []byte) ([]modzip.File, error) {
	cmd := exec.CommandContext(context.Background(), "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	listing, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	var files []modzip.File
	for _, rel := range strings.Split(string(listing), "\x00") {
		if rel == "" {
			continue
		}
		if rel == "go.mod" {
			files = append(files, dataFile{name: rel, data: gomod})
			continue
		}
		full := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(full)
		if errors.Is(err, os.ErrNotExist) {
			continue // tracked but deleted in the work tree
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, diskFile{name: rel, full: full, info: fi})
	}
	return files, nil
}

func appendList(name, version string) error {
	old, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, v := range strings.Fields(string(old)) {
		if v == version {
			return nil
		}
	}
	return os.WriteFile(name, append(old, version+"\n"...), 0o600) //nolint:gosec // G703: name is under -out, the folder the caller chose
}

type diskFile struct {
	name, full string
	info       os.FileInfo
}

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.full) }

type dataFile struct {
	name string
	data []byte
}

func (f dataFile) Path() string                 { return f.name }
func (f dataFile) Lstat() (os.FileInfo, error)  { return dataInfo(f), nil }
func (f dataFile) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.data)), nil }

type dataInfo dataFile

func (fi dataInfo) Name() string       { return filepath.Base(fi.name) }
func (fi dataInfo) Size() int64        { return int64(len(fi.data)) }
func (fi dataInfo) Mode() os.FileMode  { return 0o644 }
func (fi dataInfo) ModTime() time.Time { return time.Time{} }
func (fi dataInfo) IsDir() bool        { return false }
func (fi dataInfo) Sys() any           { return nil }
