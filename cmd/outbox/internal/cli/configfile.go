package cli

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
func (f *FlagSet) addConfigFlag() {
	if len(f.docs) == 0 || f.DocByName("config") != nil {
		return
	}
	f.StringVar(&f.configPath, "config", "", "PATH", configUsage)
}

// ConfigEntry is one key of a config file with a single value.
type ConfigEntry struct {
	Value string
	Line  int
}

// ConfigFile is a config file that has been checked against every
// command's flags.
type ConfigFile struct {
	path     string
	Top      map[string]ConfigEntry            // shared keys
	Sections map[string]map[string]ConfigEntry // "relay", "dead list"
}

// fillFromConfig sets every flag of f that neither the command line nor a
// variable set, and that f's config file sets.
func (f *FlagSet) fillFromConfig() error {
	if f.configPath == "" {
		return nil
	}
	sets := AllFlagSets()
	cf, err := LoadConfigFile(f.configPath, sets)
	if err != nil {
		return Usagef(f.Hint(), "%s: %v", f.Name(), err)
	}
	for _, d := range f.docs {
		if f.set[d.Name] || d.NoEnv || d.Name == "config" {
			continue
		}
		e, ok := cf.Sections[f.Name()][d.Name]
		if !ok && !f.noEnv { // bench and demo read their own section only
			e, ok = cf.Top[d.Name]
		}
		if !ok {
			continue
		}
		if err := f.fs.Set(d.Name, e.Value); err != nil {
			return Usagef(f.Hint(), "%s: config file %s, line %d: %s: %s", f.Name(), cf.path, e.Line, d.Name, hideValue(err, e.Value))
		}
		f.set[d.Name] = true
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

// LoadConfigFile reads the config file path and checks every key of it
// against the flag sets of every command.
func LoadConfigFile(path string, sets []*FlagSet) (*ConfigFile, error) {
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
		return nil, fmt.Errorf("config file %s: not YAML: %s", path, strings.TrimPrefix(OneLine(err.Error()), "yaml: "))
	}
	cf := &ConfigFile{path: path, Top: map[string]ConfigEntry{}, Sections: map[string]map[string]ConfigEntry{}}
	if len(doc.Content) == 0 {
		return cf, nil // empty
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, configErr(path, root.Line, "the file must be a mapping of keys to values, such as db: postgres://...")
	}
	c := configChecker{path: path, sets: sets, shared: SharedConfigKeys(sets)}
	err = c.mapping(root, "", func(key *yaml.Node, value *yaml.Node) error {
		name := key.Value
		if name == "dead" {
			return c.dead(value, cf)
		}
		if f := FlagSetByName(sets, name); f != nil && len(f.docs) > 0 && name != "dead" {
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
	sets   []*FlagSet
	shared map[string][]*FlagSet // top-level key -> the commands it sets
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
func (c *configChecker) dead(node *yaml.Node, cf *ConfigFile) error {
	return c.mapping(node, "dead: ", func(key, value *yaml.Node) error {
		f := FlagSetByName(c.sets, "dead "+key.Value)
		if f == nil {
			var subs []string // not from deadCommands, which lists the commands that call this
			for _, f := range c.sets {
				if sub, ok := strings.CutPrefix(f.Name(), "dead "); ok {
					subs = append(subs, sub)
				}
			}
			msg := fmt.Sprintf("dead: unknown subcommand %q", key.Value)
			if near := Closest(key.Value, subs); near != "" {
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
			return configErr(c.path, key.Line, "%s; dead: holds the sections %s", msg, strings.Join(subs, ":, ")+":")
		}
		return c.section(value, f, cf)
	})
}

// section checks the section of command f.
func (c *configChecker) section(node *yaml.Node, f *FlagSet, cf *ConfigFile) error {
	where := strings.ReplaceAll(f.Name(), " ", ": ") + ": "
	entries := map[string]ConfigEntry{}
	cf.Sections[f.Name()] = entries
	return c.mapping(node, where, func(key, value *yaml.Node) error {
		name := key.Value
		d := f.DocByName(name)
		if d == nil {
			var names []string
			for _, d := range f.docs {
				names = append(names, d.Name)
			}
			msg := fmt.Sprintf("%s is not a flag of %s", name, f.Name())
			if owners := c.owners(name); len(owners) > 0 {
				msg += fmt.Sprintf("; it is %s's (put it under %s)", strings.Join(owners, "'s and "), sectionPaths(owners))
			} else if near := Closest(name, names); near != "" {
				msg = fmt.Sprintf("unknown key %q; did you mean %q?", name, near)
			} else {
				msg = fmt.Sprintf("unknown key %q; see 'outbox %s --help' for its flags", name, f.Name())
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
func (c *configChecker) topKey(key, value *yaml.Node, cf *ConfigFile) error {
	name := key.Value
	holders, ok := c.shared[name]
	if !ok {
		return configErr(c.path, key.Line, "%s", c.notShared(name))
	}
	for _, f := range holders {
		if err := c.settable(key, f.DocByName(name), ""); err != nil {
			return err
		}
		e, ok, err := c.value(value, f, name, "")
		if err != nil {
			return err
		}
		if ok {
			cf.Top[name] = e
		}
	}
	return nil
}

// settable refuses a key that names a flag the command line alone sets.
func (c *configChecker) settable(key *yaml.Node, d *FlagDoc, where string) error {
	switch {
	case d.Name == "config":
		return configErr(c.path, key.Line, "%sconfig: a config file cannot name another one", where)
	case d.NoEnv:
		return configErr(c.path, key.Line, "%s%s is read from the command line only (--%s)", where, d.Name, d.Name)
	}
	return nil
}

// value checks the value of flag name of f: a single value the flag
// accepts. A null value sets nothing, as an empty variable does.
func (c *configChecker) value(node *yaml.Node, f *FlagSet, name, where string) (ConfigEntry, bool, error) {
	if node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	if node.Kind != yaml.ScalarNode {
		return ConfigEntry{}, false, configErr(c.path, node.Line, "%s%s: expected a single value, not a list or mapping", where, name)
	}
	if node.Tag == "!!null" {
		return ConfigEntry{}, false, nil
	}
	// f is a fresh flag set of the command's: setting it checks the value
	// and changes nothing that runs.
	if err := f.fs.Set(name, node.Value); err != nil {
		return ConfigEntry{}, false, configErr(c.path, node.Line, "%s%s: %s", where, name, hideValue(err, node.Value))
	}
	return ConfigEntry{Value: node.Value, Line: node.Line}, true, nil
}

// owners are the commands that have flag name and may take it from a file.
func (c *configChecker) owners(name string) []string {
	var out []string
	for _, f := range c.sets {
		if d := f.DocByName(name); d != nil && !d.NoEnv && name != "config" {
			out = append(out, f.Name())
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
		if d := f.DocByName(name); d != nil && name != "config" {
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
			keys = append(keys, strings.Fields(f.Name())[0])
		}
	}
	sort.Strings(keys)
	msg := fmt.Sprintf("unknown key %q", name)
	if near := Closest(name, keys); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return msg
}

// SharedConfigKeys are the keys a config file may set at the top level,
// each with the commands it sets: the flags that read OUTBOX_<NAME> in every
// command that reads variables and has them (a command whose flag is for
// the command line only ignores the key, as it ignores the variable). cleanup's --batch, which reads
// OUTBOX_CLEANUP_BATCH, keeps batch out: it is not the relay's --batch.
func SharedConfigKeys(sets []*FlagSet) map[string][]*FlagSet {
	shared := map[string][]*FlagSet{}
	refused := map[string]bool{}
	for _, f := range sets {
		if f.noEnv {
			continue
		}
		for _, d := range f.docs {
			switch {
			case d.Name == "config", d.NoEnv: // a flag for the command line only takes no key
			case d.EnvVar() != EnvName(d.Name):
				refused[d.Name] = true
			default:
				shared[d.Name] = append(shared[d.Name], f)
			}
		}
	}
	for name := range refused {
		delete(shared, name)
	}
	return shared
}
