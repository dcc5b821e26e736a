package main

import (
	"context"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// devOnlyModules are linked only by the developer build: the demo's
// embedded NATS server and the bench's fake Kafka.
var devOnlyModules = []string{"github.com/nats-io/nats-server/v2", "github.com/twmb/franz-go/pkg/kfake"}

// TestReleaseBuild builds the binary as make release does and checks that it
// is static, links neither in-process broker, reports the version stamped
// into it, and says clearly that it lacks the demo's and bench's brokers.
func TestReleaseBuild(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Fatalf("this test reads ELF binaries; run it on linux")
	}
	bin := filepath.Join(t.TempDir(), "outbox")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-tags", "nodevbrokers", "-trimpath",
		"-ldflags", "-s -w -X main.buildVersion=v9.8.7 -X main.buildCommit=0123abcd -X main.buildDate=2026-01-02T03:04:05Z",
		"-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("release build: %v\n%s", err, out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the release binary has a PT_INTERP program header: it is dynamically linked")
		}
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-tags"] != "nodevbrokers" || settings["-trimpath"] != "true" {
		t.Errorf("build settings CGO_ENABLED=%q -tags=%q -trimpath=%q, want 0, nodevbrokers, true",
			settings["CGO_ENABLED"], settings["-tags"], settings["-trimpath"])
	}
	if linked := linkedModules(info, devOnlyModules); len(linked) > 0 {
		t.Errorf("the release binary links %v", linked)
	}
	if runtime.GOARCH == "amd64" {
		checkStatedSize(t, bin)
	}
	// The developer build keeps them: the check above can fail.
	devInfo, err := buildinfo.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if linked := linkedModules(devInfo, devOnlyModules); len(linked) != len(devOnlyModules) {
		t.Errorf("the developer build links %v, want all of %v", linked, devOnlyModules)
	}

	run := func(args ...string) result {
		cmd := exec.CommandContext(ctx, bin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		r := result{stdout: stdout.String(), stderr: stderr.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := run("version")
	want := "outbox v9.8.7\ncommit: 0123abcd\nbuilt:  2026-01-02T03:04:05Z\ngo:     " + runtime.Version() + " linux/" + runtime.GOARCH + "\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("version: %s\nwant stdout %q", r, want)
	}
	r = run("demo", "--broker", "nats", "--dir", t.TempDir())
	if r.code != 1 || !strings.Contains(r.stderr, "demo --broker nats (the embedded NATS server) is not in this build") ||
		!strings.Contains(r.stderr, "nats://") {
		t.Errorf("demo --broker nats in a release build: %s", r)
	}
	r = run("bench", "--db", "sqlite:"+filepath.Join(t.TempDir(), "b.db"), "--broker", "kfake:", "--messages", "10")
	if r.code != 1 || !strings.Contains(r.stderr, "(the in-process fake Kafka) is not in this build") {
		t.Errorf("bench --broker kfake: in a release build: %s", r)
	}
}

// linkedModules returns those of mods that info's binary links.
func linkedModules(info *buildinfo.BuildInfo, mods []string) []string {
	var linked []string
	for _, m := range mods {
		for _, d := range info.Deps {
			if d.Path == m {
				linked = append(linked, m)
				break
			}
		}
	}
	return linked
}

// checkStatedSize checks the size the README and docs/operations.md give for
// the linux/amd64 release binary against bin's, to within 2 MB.
func checkStatedSize(t *testing.T, bin string) {
	t.Helper()
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	mb := float64(fi.Size()) / 1e6
	stated := regexp.MustCompile(`about (\d+) MB for linux/amd64`)
	for _, doc := range []string{"../../README.md", "../../docs/operations.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		m := stated.FindSubmatch(text)
		if m == nil {
			t.Errorf("%s does not say the release binary's size (\"about N MB for linux/amd64\")", doc)
			continue
		}
		if n, _ := strconv.ParseFloat(string(m[1]), 64); n < mb-2 || n > mb+2 {
			t.Errorf("%s says the release binary is about %s MB; it is %.1f MB", doc, m[1], mb)
		}
	}
}
