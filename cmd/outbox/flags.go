package main

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

// usageError is a mistake on the command line or in the environment: an
// unknown subcommand or flag, a missing required flag, a value out of range.
// It exits with status 2; every other error exits with status 1.
type usageError struct {
	msg  string
	hint string // e.g. "outbox relay --help"
}

func (e *usageError) Error() string { return e.msg }

func usagef(hint, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), hint: hint}
}

// flagDoc is what the usage text says about one flag.
type flagDoc struct {
	name        string
	placeholder string // "N", "DSN", "" for a bool
	usage       string
	def         string // shown as "default X" unless empty
	required    bool
	noEnv       bool
	// env names the variable the flag reads, instead of OUTBOX_<NAME>.
	env string
	// deprecatedEnv is a variable the flag still reads when env is not
	// set, with a warning saying to use env.
	deprecatedEnv string
}

// envVar is the variable flag d reads.
func (d *flagDoc) envVar() string {
	if d.env != "" {
		return d.env
	}
	return envName(d.name)
}

// flagSet wraps flag.FlagSet with what every subcommand shares: flags also read
// from OUTBOX_<NAME> variables (the command line wins), required flags, flags
// after positional arguments, and a usage text that lists every flag in the
// order it was defined, its variable, and an example.
type flagSet struct {
	fs       *flag.FlagSet
	path     string // "outbox dead list"
	synopsis string // "--db DSN [flags] MSG_ID..."
	summary  string // one line
	notes    []string
	examples []string
	docs     []*flagDoc
	stdout   io.Writer
	stderr   io.Writer       // for warnings; none when nil
	set      map[string]bool // set on the command line, from the environment or a config file
	// noEnv: no flag reads a variable (commandLineOnly).
	noEnv bool
	// configPath is --config's value (configfile.go).
	configPath string
}

func newFlagSet(path, synopsis, summary string, stdout io.Writer) *flagSet {
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flagSet{fs: fs, path: path, synopsis: synopsis, summary: summary, stdout: stdout}
	fs.Usage = func() {}
	return f
}

// commandLineOnly makes every flag of the set read from the command line
// only, for a command that must not take its settings from a shell set up
// for another one; why, a sentence, says so in the usage text.
func (f *flagSet) commandLineOnly(why string) {
	f.noEnv = true
	f.note(f.path + " reads no OUTBOX_ variable: " + why)
}

// readsEnv reports whether flag d also reads its variable.
func (f *flagSet) readsEnv(d *flagDoc) bool { return !f.noEnv && !d.noEnv }

// note adds a paragraph to the usage text.
func (f *flagSet) note(s string) { f.notes = append(f.notes, s) }

// example adds an example command line to the usage text.
func (f *flagSet) example(s string) { f.examples = append(f.examples, s) }

func (f *flagSet) doc(name, placeholder, usage, def string) *flagDoc {
	d := &flagDoc{name: name, placeholder: placeholder, usage: usage, def: def}
	f.docs = append(f.docs, d)
	return d
}

func (f *flagSet) stringVar(p *string, name, value, placeholder, usage string) *flagDoc {
	f.fs.StringVar(p, name, value, usage)
	return f.doc(name, placeholder, usage, strconv.Quote(value))
}

func (f *flagSet) intVar(p *int, name string, value int, placeholder, usage string) *flagDoc {
	f.fs.IntVar(p, name, value, usage)
	f.hintValue(name, "use a whole number")
	return f.doc(name, placeholder, usage, strconv.Itoa(value))
}

func (f *flagSet) int64Var(p *int64, name string, value int64, placeholder, usage string) *flagDoc {
	f.fs.Int64Var(p, name, value, usage)
	f.hintValue(name, "use a whole number")
	return f.doc(name, placeholder, usage, strconv.FormatInt(value, 10))
}

func (f *flagSet) float64Var(p *float64, name string, value float64, placeholder, usage string) *flagDoc {
	f.fs.Float64Var(p, name, value, usage)
	f.hintValue(name, "use a number such as 0.2")
	return f.doc(name, placeholder, usage, strconv.FormatFloat(value, 'g', -1, 64))
}

func (f *flagSet) durationVar(p *time.Duration, name string, value time.Duration, usage string) *flagDoc {
	f.fs.DurationVar(p, name, value, usage)
	f.hintValue(name, "use a duration such as 500ms, 30s, 10m or 168h")
	return f.doc(name, "DURATION", usage, value.String())
}

func (f *flagSet) boolVar(p *bool, name, usage string) *flagDoc {
	f.fs.BoolVar(p, name, false, usage)
	f.hintValue(name, "use true or false")
	return f.doc(name, "", usage, "")
}

// hintValue makes the named flag's value answer a value it cannot read with
// hint, which says what the flag accepts, instead of the flag package's
// "parse error".
func (f *flagSet) hintValue(name, hint string) {
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

// envName is the variable a flag also reads: OUTBOX_ and the flag's name in
// upper case with dashes as underscores.
func envName(flagName string) string {
	return "OUTBOX_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// name is the command without the program name, as messages start with it.
func (f *flagSet) name() string { return strings.TrimPrefix(f.path, "outbox ") }

// hint is the command that prints this flag set's usage.
func (f *flagSet) hint() string { return f.path + " --help" }

// parse parses args (flags may come before, between or after positional
// arguments; "--" ends the flags), then fills every flag that was not given
// from its variable, then checks the required flags. It returns the positional
// arguments. On --help it prints the usage to stdout and returns flag.ErrHelp.
func (f *flagSet) parse(args []string) ([]string, error) {
	f.addConfigFlag()
	if f.collect() {
		return nil, errCollected
	}
	var pos []string
	for {
		if err := f.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.printUsage(f.stdout)
				return nil, flag.ErrHelp
			}
			msg := flagError(err)
			if name, ok := strings.CutPrefix(msg, "unknown flag --"); ok {
				var names []string
				f.fs.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
				if near := closest(name, names); near != "" {
					msg += "; did you mean --" + near + "?"
				}
			}
			return nil, usagef(f.hint(), "%s: %s", f.name(), msg)
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
		if f.set[d.name] || !f.readsEnv(d) {
			continue
		}
		env := d.envVar()
		v, ok := os.LookupEnv(env)
		if (!ok || v == "") && d.deprecatedEnv != "" {
			if v, ok = os.LookupEnv(d.deprecatedEnv); ok && v != "" {
				env = d.deprecatedEnv
				if f.stderr != nil {
					fmt.Fprintf(f.stderr, "outbox: %s: warning: %s is deprecated for --%s and will stop working; set %s instead\n",
						f.name(), d.deprecatedEnv, d.name, d.envVar())
				}
			}
		}
		if !ok || v == "" {
			continue
		}
		if err := f.fs.Set(d.name, v); err != nil {
			return nil, usagef(f.hint(), "%s: invalid value %q in %s (read for --%s): %v", f.name(), v, env, d.name, err)
		}
		f.set[d.name] = true
	}
	if err := f.fillFromConfig(); err != nil {
		return nil, err
	}
	for _, d := range f.docs {
		if !d.required {
			continue
		}
		if !f.set[d.name] || f.fs.Lookup(d.name).Value.String() == "" {
			or := ""
			if f.readsEnv(d) {
				or = " (or " + d.envVar() + ")"
			}
			return nil, usagef(f.hint(), "%s: missing --%s%s: %s", f.name(), d.name, or, d.usage)
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

// setDefault changes the default of the string flag name, defined before,
// in the usage text and in its flag.Flag. The caller sets the variable.
func (f *flagSet) setDefault(name, def string) {
	for _, d := range f.docs {
		if d.name == name {
			d.def = strconv.Quote(def)
		}
	}
	f.fs.Lookup(name).DefValue = def
}

// printUsage writes the usage text: synopsis, summary, flags, notes, examples.
func (f *flagSet) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s %s\n\n%s\n", f.path, f.synopsis, f.summary)
	if len(f.docs) > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		for _, d := range f.docs {
			name := "--" + d.name
			if d.placeholder != "" {
				name += " " + d.placeholder
			}
			var tail []string
			switch {
			case d.required:
				tail = append(tail, "required")
			case d.def != "" && d.def != `""` && d.def != "0s":
				tail = append(tail, "default "+d.def)
			}
			switch {
			case f.noEnv: // the note says so once for all
			case d.noEnv:
				tail = append(tail, "command line only")
			default:
				tail = append(tail, "env "+d.envVar())
			}
			if len(tail) > 0 {
				fmt.Fprintf(w, "  %s\n        %s (%s)\n", name, d.usage, strings.Join(tail, "; "))
			} else {
				fmt.Fprintf(w, "  %s\n        %s\n", name, d.usage)
			}
		}
		if !f.noEnv {
			fmt.Fprintf(w, "\n%s\n", envNote)
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

const envNote = "Every flag can also be set in the environment as OUTBOX_<FLAG NAME> in upper case with\n" +
	"dashes as underscores (OUTBOX_DB, OUTBOX_BROKER, OUTBOX_TABLE, OUTBOX_BATCH, ...);\n" +
	"a flag on the command line wins over the variable."

// closest returns the candidate nearest to s in edit distance, when it is
// near enough to be a misspelling of it (at most a third of s's length, and
// at most 3 edits), or "". A tie goes to the first candidate.
func closest(s string, candidates []string) string {
	best, bestDist := "", min(3, max(1, len(s)/3))+1
	for _, c := range candidates {
		if d := suggest.Distance(s, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}
