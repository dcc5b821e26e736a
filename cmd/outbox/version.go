package main

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/relaycmd"
	"io"
	"runtime"
	"runtime/debug"
)

// Set by the release build (make release) with
// -ldflags "-X main.buildVersion=v1.2.3 -X main.buildCommit=... -X main.buildDate=...".
// When empty, buildInfo falls back to what the Go toolchain recorded.
var (
	buildVersion string
	buildCommit  string
	buildDate    string
)

func init() { relaycmd.Version = buildInfo().Version }

// versionInfo describes the binary: the version it was released as, the
// commit and the time it was built from, and the Go toolchain.
type versionInfo struct {
	Version, Commit, Date, Go string
}

// buildInfo returns the binary's version information: the values set with
// -ldflags -X, else the module version and the vcs.revision and vcs.time
// settings that go build records, else "devel" and "unknown". A commit
// built from a modified work tree ends in "-dirty".
func buildInfo() versionInfo {
	v := versionInfo{Version: buildVersion, Commit: buildCommit, Date: buildDate, Go: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v.Version = info.Main.Version
		}
		var modified bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Commit == "" {
					v.Commit = s.Value
				}
			case "vcs.time":
				if v.Date == "" {
					v.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && buildCommit == "" && v.Commit != "" {
			v.Commit += "-dirty"
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	if v.Date == "" {
		v.Date = "unknown"
	}
	return v
}

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	f := cli.NewFlagSet("outbox version", "", "Print the version of this binary, the commit and the time it was built from, and the Go release that built it.", stdout)
	f.Example("outbox version")
	f.Example("outbox --version")
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return cli.Usagef(f.Hint(), "version: unexpected argument %q", pos[0])
	}
	v := buildInfo()
	fmt.Fprintf(stdout, "outbox %s\ncommit: %s\nbuilt:  %s\ngo:     %s %s/%s\n", v.Version, v.Commit, v.Date, v.Go, runtime.GOOS, runtime.GOARCH)
	return nil
}
