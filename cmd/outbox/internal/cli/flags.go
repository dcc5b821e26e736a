// Package cli holds what the outbox commands share on the command line:
// flag sets whose flags also read OUTBOX_ variables and a config file,
// their usage text, the usage errors that exit with status 2, and the
// secrets every printed message is scrubbed of.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"github.com/outbox-go/outbox/internal/suggest"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// UsageError is a mistake on the command line or in the environment: an
// unknown subcommand or flag, a missing required flag, a value out of range.
// It exits with status 2; every other error exits with status 1.
type UsageError struct {
	msg  string
	hint string // e.g. "outbox relay --help"
}

// Error returns the message, without the hint.
func (e *UsageError) Error() string { return e.msg }

// Hint is the command that prints the usage the mistake goes against.
func (e *UsageError) Hint() string { return e.hint }

// Usagef returns a *UsageError with the message format makes of args and
// the command hint, such as "outbox relay --help", that prints the usage.
func Usagef(hint, format string, args ...any) error {
	return &UsageError{msg: fmt.Sprintf(format, args...), hint: hint}
}

// FlagDoc is what the usage text says about one flag.
type FlagDoc struct {
	Name        string
	Placeholder string // "N", "DSN", "" for a bool
	Usage       string
	Def         string // shown as "default X" unless empty
	Required    bool
	NoEnv       bool
	// Env names the variable the flag reads, instead of OUTBOX_<NAME>.
	Env string
	// DeprecatedEnv is a variable the flag still reads when Env is not
	// set, with a warning saying to use Env.
	DeprecatedEnv string
}

// EnvVar is the variable flag d reads.
func (d *FlagDoc) EnvVar() string {
	if d.Env != "" {
		return d.Env
	}
	return EnvName(d.Name)
}

// FlagSet wraps flag.FlagSet with what every subcommand shares: flags also read
// from OUTBOX_<NAME> variables (the command line wins), required flags, flags
// after positional arguments, and a usage text that lists every flag in the
// order it was defined, its variable, and an example.
type FlagSet struct {
	fs       *flag.FlagSet
	path     string // "outbox dead list"
	synopsis string // "--db DSN [flags] MSG_ID..."
	summary  string // one line
	notes    []string
	examples []string
	docs     []*FlagDoc
	stdout   io.Writer
	stderr   io.Writer       // for warnings; none when nil
	set      map[string]bool // set on the command line, from the environment or a config file
	// noEnv: no flag reads a variable (commandLineOnly).
	noEnv bool
	// configPath is --config's value (configfile.go).
	configPath string
}

// NewFlagSet returns an empty flag set for the command path ("outbox dead
// list"), whose usage text starts with synopsis and summary and goes to
// stdout on --help.
func NewFlagSet(path, synopsis, summary string, stdout io.Writer) *FlagSet {
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &FlagSet{fs: fs, path: path, synopsis: synopsis, summary: summary, stdout: stdout}
	fs.Usage = func() {}
	return f
}

// CommandLineOnly makes every flag of the set read from the command line
// only, for a command that must not take its settings from a shell set up
// for another one; why, a sentence, says so in the usage text.
func (f *FlagSet) CommandLineOnly(why string) {
	f.noEnv = true
	f.Note(f.path + " reads no OUTBOX_ variable: " + why)
}

// readsEnv reports whether flag d also reads its variable.
func (f *FlagSet) readsEnv(d *FlagDoc) bool { return !f.noEnv && !d.NoEnv }

// Note adds a paragraph to the usage text.
func (f *FlagSet) Note(s string) { f.notes = append(f.notes, s) }

// Example adds an example command line to the usage text.
func (f *FlagSet) Example(s string) { f.examples = append(f.examples, s) }

func (f *FlagSet) doc(name, placeholder, usage, def string) *FlagDoc {
	d := &FlagDoc{Name: name, Placeholder: placeholder, Usage: usage, Def: def}
	f.docs = append(f.docs, d)
	return d
}

// StringVar defines a string flag with a usage text and a placeholder for
// its value, and returns its doc.
func (f *FlagSet) StringVar(p *string, name, value, placeholder, usage string) *FlagDoc {
	f.fs.StringVar(p, name, value, usage)
	return f.doc(name, placeholder, usage, strconv.Quote(value))
}

// IntVar defines an int flag and returns its doc.
func (f *FlagSet) IntVar(p *int, name string, value int, placeholder, usage string) *FlagDoc {
	f.fs.IntVar(p, name, value, usage)
	f.hintValue(name, "use a whole number")
	return f.doc(name, placeholder, usage, strconv.Itoa(value))
}

// Int64Var defines an int64 flag and returns its doc.
func (f *FlagSet) Int64Var(p *int64, name string, value int64, placeholder, usage string) *FlagDoc {
	f.fs.Int64Var(p, name, value, usage)
	f.hintValue(name, "use a whole number")
	return f.doc(name, placeholder, usage, strconv.FormatInt(value, 10))
}

// Float64Var defines a float64 flag and returns its doc.
func (f *FlagSet) Float64Var(p *float64, name string, value float64, placeholder, usage string) *FlagDoc {
	f.fs.Float64Var(p, name, value, usage)
	f.hintValue(name, "use a number such as 0.2")
	return f.doc(name, placeholder, usage, strconv.FormatFloat(value, 'g', -1, 64))
}

// DurationVar defines a duration flag and returns its doc.
func (f *FlagSet) DurationVar(p *time.Duration, name string, value time.Duration, usage string) *FlagDoc {
	f.fs.DurationVar(p, name, value, usage)
	f.hintValue(name, "use a duration such as 500ms, 30s, 10m or 168h")
	return f.doc(name, "DURATION", usage, value.String())
}

// BoolVar defines a bool flag, false by default, and returns its doc.
func (f *FlagSet) BoolVar(p *bool, name, usage string) *FlagDoc {
	f.fs.BoolVar(p, name, false, usage)
	f.hintValue(name, "use true or false")
	return f.doc(name, "", usage, "")
}

// hintValue makes the named flag's value answer a value it cannot read with
// hint, which says what the flag accepts, instead of the flag package's
// "parse error".
func (f *FlagSet) hintValue(name, hint string) {
	fl := f.fs.Lookup(name)
	fl.Value = hintedValue{Value: fl.Value, hint: hint}
}

// hintedValue is a flag.Value whose Set says what the flag accepts when it
// cannot read a value. It keeps a bool flag a bool flag (one that needs no
// value on the command line).
type hintedValue struct {
	flag.Value
	hint string
}

func (v hintedValue) Set(s string) error {
	err := v.Value.Set(s)
	if err != nil && err.Error() == "parse error" { // the flag package's errParse
		return errors.New(v.hint)
	}
	return err // "value out of range" says it already
}

func (v hintedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (v hintedValue) Get() any {
	if g, ok := v.Value.(flag.Getter); ok {
		return g.Get()
	}
	return v.String()
}

// EnvName is the variable a flag also reads: OUTBOX_ and the flag's name in
// upper case with dashes as underscores.
func EnvName(flagName string) string {
	return "OUTBOX_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Name is the command without the program name, as messages start with it.
func (f *FlagSet) Name() string { return strings.TrimPrefix(f.path, "outbox ") }

// Hint is the command that prints this flag set's usage.
func (f *FlagSet) Hint() string { return f.path + " --help" }

// Parse parses args (flags may come before, between or after positional
// arguments; "--" ends the flags), then fills every flag that was not given
// from its variable, then checks the required flags. It returns the positional
// arguments. On --help it prints the usage to stdout and returns flag.ErrHelp.
func (f *FlagSet) Parse(args []string) ([]string, error) {
	f.addConfigFlag()
	if f.collect() {
		return nil, errCollected
	}
	var pos []string
	for {
		if err := f.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.PrintUsage(f.stdout)
				return nil, flag.ErrHelp
			}
			msg := flagError(err)
			if name, ok := strings.CutPrefix(msg, "unknown flag --"); ok {
				var names []string
				f.fs.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
				if near := Closest(name, names); near != "" {
					msg += "; did you mean --" + near + "?"
				}
			}
			return nil, Usagef(f.Hint(), "%s: %s", f.Name(), msg)
		}
		rest := f.fs.Args()
		if len(rest) == 0 {
			break
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}

	f.set = map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	for _, d := range f.docs {
		if f.set[d.Name] || !f.readsEnv(d) {
			continue
		}
		env := d.EnvVar()
		v, ok := os.LookupEnv(env)
		if (!ok || v == "") && d.DeprecatedEnv != "" {
			if v, ok = os.LookupEnv(d.DeprecatedEnv); ok && v != "" {
				env = d.DeprecatedEnv
				if f.stderr != nil {
					fmt.Fprintf(f.stderr, "outbox: %s: warning: %s is deprecated for --%s and will stop working; set %s instead\n",
						f.Name(), d.DeprecatedEnv, d.Name, d.EnvVar())
				}
			}
		}
		if !ok || v == "" {
			continue
		}
		if err := f.fs.Set(d.Name, v); err != nil {
			return nil, Usagef(f.Hint(), "%s: invalid value %q in %s (read for --%s): %v", f.Name(), v, env, d.Name, err)
		}
		f.set[d.Name] = true
	}
	if err := f.fillFromConfig(); err != nil {
		return nil, err
	}
	for _, d := range f.docs {
		if !d.Required {
			continue
		}
		if !f.set[d.Name] || f.fs.Lookup(d.Name).Value.String() == "" {
			or := ""
			if f.readsEnv(d) {
				or = " (or " + d.EnvVar() + ")"
			}
			return nil, Usagef(f.Hint(), "%s: missing --%s%s: %s", f.Name(), d.Name, or, d.Usage)
		}
	}
	return pos, nil
}

// flagError rewrites the flag package's messages with the double dashes the
// usage text shows. A refused value reads "invalid value "abc" for --batch:
// use a whole number", the reason coming from hintedValue.
func flagError(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag --" + name
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "flag needs an argument: --" + name
	}
	// "invalid value %q for flag -%s: %v" and, for a bool flag,
	// "invalid boolean value %q for -%s: %v". The value is quoted, so it is
	// read as a quoted string: whatever it holds is not taken for the rest.
	for _, p := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, p)
		if !ok {
			continue
		}
		value, err := strconv.QuotedPrefix(rest)
		if err != nil {
			break
		}
		rest = strings.TrimPrefix(rest[len(value):], " for")
		rest = strings.TrimPrefix(rest, " flag")
		name, reason, ok := strings.Cut(strings.TrimPrefix(rest, " -"), ": ")
		if !ok {
			break
		}
		return fmt.Sprintf("invalid value %s for --%s: %s", value, name, reason)
	}
	return msg
}

// SetDefault changes the default of the string flag name, defined before,
// in the usage text and in its flag.Flag. The caller sets the variable.
func (f *FlagSet) SetDefault(name, def string) {
	for _, d := range f.docs {
		if d.Name == name {
			d.Def = strconv.Quote(def)
		}
	}
	f.fs.Lookup(name).DefValue = def
}

// PrintUsage writes the usage text: synopsis, summary, flags, notes, examples.
func (f *FlagSet) PrintUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s %s\n\n%s\n", f.path, f.synopsis, f.summary)
	if len(f.docs) > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		for _, d := range f.docs {
			name := "--" + d.Name
			if d.Placeholder != "" {
				name += " " + d.Placeholder
			}
			var tail []string
			switch {
			case d.Required:
				tail = append(tail, "required")
			case d.Def != "" && d.Def != `""` && d.Def != "0s":
				tail = append(tail, "default "+d.Def)
			}
			switch {
			case f.noEnv: // the note says so once for all
			case d.NoEnv:
				tail = append(tail, "command line only")
			default:
				tail = append(tail, "env "+d.EnvVar())
			}
			if len(tail) > 0 {
				fmt.Fprintf(w, "  %s\n        %s (%s)\n", name, d.Usage, strings.Join(tail, "; "))
			} else {
				fmt.Fprintf(w, "  %s\n        %s\n", name, d.Usage)
			}
		}
		if !f.noEnv {
			fmt.Fprintf(w, "\n%s\n", EnvNote)
		}
	}
	for _, n := range f.notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
	if len(f.examples) > 0 {
		fmt.Fprintf(w, "\nExample:\n")
		for _, e := range f.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// EnvNote is the usage text's paragraph on the OUTBOX_ variables.
const EnvNote = "Every flag can also be set in the environment as OUTBOX_<FLAG NAME> in upper case with\n" +
	"dashes as underscores (OUTBOX_DB, OUTBOX_BROKER, OUTBOX_TABLE, OUTBOX_BATCH, ...);\n" +
	"a flag on the command line wins over the variable."

// Closest returns the candidate nearest to s in edit distance, when it is
// near enough to be a misspelling of it (at most a third of s's length, and
// at most 3 edits), or "". A tie goes to the first candidate.
func Closest(s string, candidates []string) string {
	best, bestDist := "", min(3, max(1, len(s)/3))+1
	for _, c := range candidates {
		if d := suggest.Distance(s, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// NoArgs rejects positional arguments for commands that take none.
func NoArgs(f *FlagSet, pos []string) error {
	if len(pos) > 0 {
		return Usagef(f.Hint(), "%s: unexpected argument %q", f.Name(), pos[0])
	}
	return nil
}

// OneLine joins the lines of s with "; ", dropping repeated lines (pgx, for
// one, reports the same refused connection once per attempt).
func OneLine(s string) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" || seen[line] {
			continue
		}
		seen[line] = true
		switch prev := b.String(); {
		case prev == "":
		case strings.HasSuffix(prev, ":"):
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(line)
	}
	return b.String()
}
