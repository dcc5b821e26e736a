package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A config file (--config PATH, OUTBOX_CONFIG) is YAML: top-level keys that
// every command with that flag reads, as it reads OUTBOX_<KEY>, and
// sections named after commands ("relay:", "cleanup:", "dead: list:")
// whose keys are that command's flag names. A flag on the command line wins
// over its variable, which wins over the file; in the file a command's
// section wins over the top level. docs/configuration.md has the details.

const configUsage = "read flags from the YAML file PATH: top-level keys set the flag of that name in every command " +
	"that has it, a section per command (relay:, cleanup:, dead: list:, ...) that command's flags; " +
	"flags and variables win over it (docs/configuration.md)"

// configMaxBytes bounds a config file.
const configMaxBytes = 1 << 20

// addConfigFlag gives a flag set with flags the --config flag, once.
func (f *flagSet) addConfigFlag() {
	if len(f.docs) == 0 || f.docByName("config") != nil {
		return
	}
	f.stringVar(&f.configPath, "config", "", "PATH", configUsage)
}

// configEntry is one key of a config file with a single value.
type configEntry struct {
	value string
	line  int
}

// configFile is a config file that has been checked against every
// command's flags.
type configFile struct {
	path     string
	top      map[string]configEntry            // shared keys
	sections map[string]map[string]configEntry // "relay", "dead list"
}

// fillFromConfig sets every flag of f that neither the command line nor a
// variable set, and that f's config file sets.
func (f *flagSet) fillFromConfig() error {
	if f.configPath == "" {
		return nil
	}
	sets := allFlagSets()
	cf, err := loadConfigFile(f.configPath, sets)
	if err != nil {
		return usagef(f.hint(), "%s: %v", f.name(), err)
	}
	for _, d := range f.docs {
		if f.set[d.name] || d.noEnv || d.name == "config" {
			continue
		}
		e, ok := cf.sections[f.name()][d.name]
		if !ok && !f.noEnv { // bench and demo read their own section only
			e, ok = cf.top[d.name]
		}
		if !ok {
			continue
		}
		if err := f.fs.Set(d.name, e.value); err != nil {
			return usagef(f.hint(), "%s: config file %s, line %d: %s: %s", f.name(), cf.path, e.line, d.name, hideValue(err, e.value))
		}
		f.set[d.name] = true
	}
	return nil
}

// hideValue is err's message with value masked, so that a secret in a
// config file never reaches the terminal.
func hideValue(err error, value string) string {
	msg := err.Error()
	if len(value) >= 4 { // shorter, it is no secret and may be a word of msg

		msg = strings.ReplaceAll(msg, value, "xxxxx")
	}
	return msg
}

// configErr is a mistake at a line of a config file.
func configErr(path string, line int, format string, args ...any) error {
	return fmt.Errorf("config file %s, line %d: %s", path, line, fmt.Sprintf(format, args...))
}

// loadConfigFile reads the config file path and checks every key of it
// against the flag sets of every command.
func loadConfigFile(path string, sets []*flagSet) (*configFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, configMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if len(data) > configMaxBytes {
		return nil, fmt.Errorf("config file %s: larger than %d KiB; is it the right file?", path, configMaxBytes>>10)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: not YAML: %s", path, strings.TrimPrefix(oneLine(err.Error()), "yaml: "))
	}
	cf := &configFile{path: path, top: map[string]configEntry{}, sections: map[string]map[string]configEntry{}}
	if len(doc.Content) == 0 {
		return cf, nil // empty
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, configErr(path, root.Line, "the file must be a mapping of keys to values, such as db: postgres://...")
	}
	c := configChecker{path: path, sets: sets, shared: sharedConfigKeys(sets)}
	err = c.mapping(root, "", func(key *yaml.Node, value *yaml.Node) error {
		name := key.Value
		if name == "dead" {
			return c.dead(value, cf)
		}
		if f := flagSetByName(sets, name); f != nil && len(f.docs) > 0 && name != "dead" {
			return c.section(value, f, cf)
		}
		return c.topKey(key, value, cf)
	})
	if err != nil {
		return nil, err
	}
	return cf, nil
}

type configChecker struct {
	path   string
	sets   []*flagSet
	shared map[string][]*flagSet // top-level key -> the commands it sets
}

// mapping calls fn on each key of node, a mapping, in order, refusing a key
// given twice. where names the section for messages ("relay: ").
func (c *configChecker) mapping(node *yaml.Node, where string, fn func(key, value *yaml.Node) error) error {
	if node.Kind != yaml.MappingNode {
		return configErr(c.path, node.Line, "%sexpected a mapping of keys to values", where)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, value := node.Content[i], node.Content[i+1]
		if key.Kind != yaml.ScalarNode {
			return configErr(c.path, key.Line, "%sa key must be a name", where)
		}
		if prev, ok := seen[key.Value]; ok {
			return configErr(c.path, key.Line, "%s%s is set twice (first at line %d)", where, key.Value, prev)
		}
		seen[key.Value] = key.Line
		if err := fn(key, value); err != nil {
			return err
		}
	}
	return nil
}

// dead checks the dead: section, which holds one section per subcommand.
func (c *configChecker) dead(node *yaml.Node, cf *configFile) error {
	return c.mapping(node, "dead: ", func(key, value *yaml.Node) error {
		f := flagSetByName(c.sets, "dead "+key.Value)
		if f == nil {
			var subs []string // not from deadCommands, which lists the commands that call this
			for _, f := range c.sets {
				if sub, ok := strings.CutPrefix(f.name(), "dead "); ok {
					subs = append(subs, sub)
				}
			}
			msg := fmt.Sprintf("dead: unknown subcommand %q", key.Value)
			if near := closest(key.Value, subs); near != "" {
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
			return configErr(c.path, key.Line, "%s; dead: holds the sections %s", msg, strings.Join(subs, ":, ")+":")
		}
		return c.section(value, f, cf)
	})
}

// section checks the section of command f.
func (c *configChecker) section(node *yaml.Node, f *flagSet, cf *configFile) error {
	where := strings.ReplaceAll(f.name(), " ", ": ") + ": "
	entries := map[string]configEntry{}
	cf.sections[f.name()] = entries
	return c.mapping(node, where, func(key, value *yaml.Node) error {
		name := key.Value
		d := f.docByName(name)
		if d == nil {
			var names []string
			for _, d := range f.docs {
				names = append(names, d.name)
			}
			msg := fmt.Sprintf("%s is not a flag of %s", name, f.name())
			if owners := c.owners(name); len(owners) > 0 {
				msg += fmt.Sprintf("; it is %s's (put it under %s)", strings.Join(owners, "'s and "), sectionPaths(owners))
			} else if near := closest(name, names); near != "" {
				msg = fmt.Sprintf("unknown key %q; did you mean %q?", name, near)
			} else {
				msg = fmt.Sprintf("unknown key %q; see 'outbox %s --help' for its flags", name, f.name())
			}
			return configErr(c.path, key.Line, "%s%s", where, msg)
		}
		if err := c.settable(key, d, where); err != nil {
			return err
		}
		e, ok, err := c.value(value, f, name, where)
		if ok {
			entries[name] = e
		}
		return err
	})
}

// topKey checks a top-level key that is not a section.
func (c *configChecker) topKey(key, value *yaml.Node, cf *configFile) error {
	name := key.Value
	holders, ok := c.shared[name]
	if !ok {
		return configErr(c.path, key.Line, "%s", c.notShared(name))
	}
	for _, f := range holders {
		if err := c.settable(key, f.docByName(name), ""); err != nil {
			return err
		}
		e, ok, err := c.value(value, f, name, "")
		if err != nil {
			return err
		}
		if ok {
			cf.top[name] = e
		}
	}
	return nil
}

// settable refuses a key that names a flag the command line alone sets.
func (c *configChecker) settable(key *yaml.Node, d *flagDoc, where string) error {
	switch {
	case d.name == "config":
		return configErr(c.path, key.Line, "%sconfig: a config file cannot name another one", where)
	case d.noEnv:
		return configErr(c.path, key.Line, "%s%s is read from the command line only (--%s)", where, d.name, d.name)
	}
	return nil
}

// value checks the value of flag name of f: a single value the flag
// accepts. A null value sets nothing, as an empty variable does.
func (c *configChecker) value(node *yaml.Node, f *flagSet, name, where string) (configEntry, bool, error) {
	if node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	if node.Kind != yaml.ScalarNode {
		return configEntry{}, false, configErr(c.path, node.Line, "%s%s: expected a single value, not a list or mapping", where, name)
	}
	if node.Tag == "!!null" {
		return configEntry{}, false, nil
	}
	// f is a fresh flag set of the command's: setting it checks the value
	// and changes nothing that runs.
	if err := f.fs.Set(name, node.Value); err != nil {
		return configEntry{}, false, configErr(c.path, node.Line, "%s%s: %s", where, name, hideValue(err, node.Value))
	}
	return configEntry{value: node.Value, line: node.Line}, true, nil
}

// owners are the commands that have flag name and may take it from a file.
func (c *configChecker) owners(name string) []string {
	var out []string
	for _, f := range c.sets {
		if d := f.docByName(name); d != nil && !d.noEnv && name != "config" {
			out = append(out, f.name())
		}
	}
	return out
}

// sectionPaths is where the sections of commands are: "relay: or dead: list:".
func sectionPaths(cmds []string) string {
	var out []string
	for _, c := range cmds {
		out = append(out, strings.ReplaceAll(c, " ", ": ")+":")
	}
	return strings.Join(out, " or ")
}

// notShared says why name cannot be a top-level key.
func (c *configChecker) notShared(name string) string {
	owners := c.owners(name)
	if len(owners) > 0 {
		if len(owners) == 1 {
			return fmt.Sprintf("%s is a flag of %s only; put it under %s", name, owners[0], sectionPaths(owners))
		}
		return fmt.Sprintf("%s is not one flag in every command that has it (%s); put it under %s",
			name, strings.Join(owners, ", "), sectionPaths(owners))
	}
	for _, f := range c.sets {
		if d := f.docByName(name); d != nil && name != "config" {
			return fmt.Sprintf("%s is read from the command line only (%s --%s)", name, f.path, name)
		}
	}
	if name == "config" {
		return "config: a config file cannot name another one"
	}
	keys := slices.Collect(func(yield func(string) bool) {
		for k := range c.shared {
			if !yield(k) {
				return
			}
		}
	})
	for _, f := range c.sets {
		if len(f.docs) > 0 {
			keys = append(keys, strings.Fields(f.name())[0])
		}
	}
	sort.Strings(keys)
	msg := fmt.Sprintf("unknown key %q", name)
	if near := closest(name, keys); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return msg
}

// sharedConfigKeys are the keys a config file may set at the top level,
// each with the commands it sets: the flags that read OUTBOX_<NAME> in every
// command that reads variables and has them (a command whose flag is for
// the command line only ignores the key, as it ignores the variable). cleanup's --batch, which reads
// OUTBOX_CLEANUP_BATCH, keeps batch out: it is not the relay's --batch.
func sharedConfigKeys(sets []*flagSet) map[string][]*flagSet {
	shared := map[string][]*flagSet{}
	refused := map[string]bool{}
	for _, f := range sets {
		if f.noEnv {
			continue
		}
		for _, d := range f.docs {
			switch {
			case d.name == "config", d.noEnv: // a flag for the command line only takes no key
			case d.envVar() != envName(d.name):
				refused[d.name] = true
			default:
				shared[d.name] = append(shared[d.name], f)
			}
		}
	}
	for name := range refused {
		delete(shared, name)
	}
	return shared
}
