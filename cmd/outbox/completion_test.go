package main

import (
	"bytes"
	"flag"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// completionScript writes outbox completion shell's script into a file and
// returns its path.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"completion", shell}, &out, &errOut); code != 0 {
		t.Fatalf("outbox completion %s: exit %d: %s", shell, code, errOut.String())
	}
	path := filepath.Join(t.TempDir(), "outbox."+shell)
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func lookShell(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (apt-get install %s, which .ci/run does): its completion script was not tested", name, name)
	}
	return p
}

// bashCandidates sources the bash script in a real bash and returns, for
// each command line (its words as bash splits them, the last being the word
// completed), the sorted COMPREPLY, joined by spaces.
func bashCandidates(t *testing.T, lines [][]string) []string {
	t.Helper()
	var driver strings.Builder
	driver.WriteString("source \"$1\" || exit 1\ncomplete -p outbox || exit 1\n" +
		"_c() { COMP_WORDS=(\"$@\"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMPREPLY=(); _outbox;" +
		" printf '%s\\n' \"${COMPREPLY[@]}\" | LC_ALL=C sort | tr '\\n' ' '; echo; }\n")
	for _, l := range lines {
		driver.WriteString("_c")
		for _, w := range l {
			driver.WriteString(" '" + strings.ReplaceAll(w, "'", `'\''`) + "'")
		}
		driver.WriteString("\n")
	}
	cmd := exec.Command(lookShell(t, "bash"), "--norc", "--noprofile", "-c", driver.String(), "bash", completionScript(t, "bash"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(got) != len(lines)+1 || got[0] != "complete -F _outbox outbox" {
		t.Fatalf("bash printed:\n%s", out)
	}
	for i := range got[1:] {
		got[i+1] = strings.TrimSpace(got[i+1])
	}
	return got[1:]
}

func TestBashCompletion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "cache"), 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		words []string
		want  string
	}{
		{[]string{"outbox", "re"}, "relay"},
		{[]string{"outbox", "d"}, "dead demo"},
		{[]string{"outbox", "-"}, "--help --version"},
		{[]string{"outbox", "relay", "--ba"}, "--batch"},
		{[]string{"outbox", "relay", "--db", "sqlite:x.db", "--max-r"}, "--max-retries"},
		{[]string{"outbox", "dead", ""}, "drop list retry show"},
		{[]string{"outbox", "dead", "list", "--li"}, "--limit"},
		{[]string{"outbox", "dead", "drop", "--y"}, "--yes"},
		{[]string{"outbox", "relay", "--log-level", ""}, "debug error info warn"},
		{[]string{"outbox", "relay", "--log-level", "=", "w"}, "warn"},
		{[]string{"outbox", "relay", "--log-format", "="}, "json text"},
		{[]string{"outbox", "migrate", "--dialect", "m"}, "mariadb mysql"},
		{[]string{"outbox", "relay", "--db-tls-ca", dir + "/c"}, dir + "/ca.pem " + dir + "/cache"},
		{[]string{"outbox", "demo", "--dir", dir + "/c"}, dir + "/cache"},
		{[]string{"outbox", "relay", "--db", ""}, ""},
		{[]string{"outbox", "relay", "--batch", "5"}, ""},
		{[]string{"outbox", "completion", ""}, "bash fish zsh"},
		{[]string{"outbox", "help", "st"}, "stats"},
		{[]string{"outbox", "help", "dead", "r"}, "retry"},
		{[]string{"outbox", "nosuch", "--"}, ""},
	}
	var lines [][]string
	for _, c := range cases {
		lines = append(lines, c.words)
	}
	got := bashCandidates(t, lines)
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("%q: COMPREPLY %q, want %q", strings.Join(c.words, " "), got[i], c.want)
		}
	}
}

// TestBashCompletionHasEveryFlag: for every command, "outbox CMD --" offers
// exactly the flags its flag set defines, and --help.
func TestBashCompletionHasEveryFlag(t *testing.T) {
	t.Parallel()
	sets := cli.AllFlagSets()
	if len(sets) < 12 {
		t.Fatalf("%d flag sets; the collector misses commands", len(sets))
	}
	var lines [][]string
	for _, f := range sets {
		lines = append(lines, append(append([]string{"outbox"}, strings.Fields(f.Name())...), "--"))
	}
	got := bashCandidates(t, lines)
	for i, f := range sets {
		var want []string
		f.VisitAll(func(fl *flag.Flag) { want = append(want, "--"+fl.Name) })
		if f.Name() != "completion" { // which takes a shell's name only
			want = append(want, "--help")
		}
		sort.Strings(want)
		if got[i] != strings.Join(want, " ") {
			t.Errorf("outbox %s --: COMPREPLY\n  %s\nwant\n  %s", f.Name(), got[i], strings.Join(want, " "))
		}
	}
}

func TestZshCompletionSyntax(t *testing.T) {
	t.Parallel()
	zsh := lookShell(t, "zsh")
	script := completionScript(t, "zsh")
	if out, err := exec.Command(zsh, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	// Sourced after compinit, the script registers _outbox for outbox.
	out, err := exec.Command(zsh, "-f", "-c",
		`autoload -U compinit && compinit -u -D && source "$1" && print -r -- $_comps[outbox]`, "zsh", script).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "_outbox" {
		t.Fatalf("zsh: source the script: %v\n%s", err, out)
	}
}

func TestFishCompletion(t *testing.T) {
	t.Parallel()
	fish := lookShell(t, "fish")
	script := completionScript(t, "fish")
	if out, err := exec.Command(fish, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("fish -n: %v\n%s", err, out)
	}
	cases := []struct{ line, want string }{
		{"outbox re", "relay"},
		{"outbox relay --ba", "--batch"},
		{"outbox dead ", "drop list retry show"},
		{"outbox dead list --li", "--limit"},
		{"outbox relay --log-level ", "debug error info warn"},
		{"outbox completion ", "bash fish zsh"},
		{"outbox stats --js", "--json"},
	}
	var driver strings.Builder
	driver.WriteString("source $argv[1]; or exit 1\n")
	for _, c := range cases {
		driver.WriteString("complete -C " + fishQuote(c.line) + " | string replace -r '\\t.*' '' | sort | string join ' '; echo\n")
	}
	out, err := exec.Command(fish, "--no-config", "-c", driver.String(), script).CombinedOutput()
	if err != nil {
		t.Fatalf("fish: %v\n%s", err, out)
	}
	got := strings.Split(string(out), "\n")
	for i, c := range cases {
		// "string join" ends with a newline of its own; echo adds an empty line.
		var g string
		if 2*i < len(got) {
			g = strings.TrimSpace(got[2*i])
		}
		if g != c.want {
			t.Errorf("complete -C %q: %q, want %q\n(all output: %q)", c.line, g, c.want, out)
		}
	}
}

func TestCompletionUsage(t *testing.T) {
	t.Parallel()
	checkError(t, runCLI(t, nil, "completion", "bsh"), 2, `unknown shell "bsh"; did you mean "bash"?`, "use bash, zsh or fish")
	checkError(t, runCLI(t, nil, "completion"), 2, "completion: name one shell: bash, zsh or fish")
	checkError(t, runCLI(t, nil, "completion", "bash", "zsh"), 2, "name one shell")
	r := runCLI(t, nil, "completion", "powershell")
	checkError(t, r, 2, `unknown shell "powershell"; use bash, zsh or fish`)
	if strings.Contains(r.stderr, "did you mean") {
		t.Errorf("a suggestion for a shell nothing resembles: %s", r.stderr)
	}
	help := mustRun(t, "--help").stdout
	if !slices.ContainsFunc(strings.Split(help, "\n"), func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "completion ") }) {
		t.Errorf("outbox --help does not list completion:\n%s", help)
	}
	if out := mustRun(t, "completion", "--help").stdout; !strings.Contains(out, "source <(outbox completion bash)") {
		t.Errorf("outbox completion --help says not how to load the script:\n%s", out)
	}
}
