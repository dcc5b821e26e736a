package main

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"io"
	"strings"
)

// completionShells are the shells "outbox completion" writes a script for.
var completionShells = []string{"bash", "zsh", "fish"}

func runCompletion(_ context.Context, args []string, stdout, _ io.Writer) error {
	f := cli.NewFlagSet("outbox completion", "bash|zsh|fish",
		"Print a script that completes outbox's commands, subcommands, flags, file names after\n"+
			"--*-file and --*-ca style flags, and the values of flags that take one of a few words.", stdout)
	f.Note("Load it in the current shell, or install it where the shell looks for completions:\n" +
		"  bash: source <(outbox completion bash)   or   outbox completion bash > /etc/bash_completion.d/outbox\n" +
		"  zsh:  outbox completion zsh > \"${fpath[1]}/_outbox\"   (then start a new shell; compinit must run)\n" +
		"  fish: outbox completion fish > ~/.config/fish/completions/outbox.fish")
	f.Example("source <(outbox completion bash)")
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return cli.Usagef(f.Hint(), "completion: name one shell: bash, zsh or fish")
	}
	tree := completionTreeOf()
	switch pos[0] {
	case "bash":
		writeBashCompletion(stdout, tree)
	case "zsh":
		writeZshCompletion(stdout, tree)
	case "fish":
		writeFishCompletion(stdout, tree)
	default:
		msg := fmt.Sprintf("completion: unknown shell %q", pos[0])
		if near := cli.Closest(pos[0], completionShells); near != "" {
			msg += fmt.Sprintf("; did you mean %q?", near)
		}
		return cli.Usagef(f.Hint(), "%s; use bash, zsh or fish", msg)
	}
	return nil
}

// compCommand is a command or subcommand as a completion script sees it.
type compCommand struct {
	name    string // "relay", "dead list"
	summary string
	flags   []*cli.FlagDoc
	args    []string // words its first argument takes (completion: the shells)
}

// compTree is what the scripts complete: the commands, the subcommands of
// dead, and the flags of each.
type compTree struct {
	commands []compCommand // first words, in help order
	dead     []compCommand // "dead list", ...
	withArgs []compCommand // every command that takes flags or words, dead's by their full name
}

// completionTreeOf is completionTree, set in init: commands, which it
// reads, lists runCompletion.
var completionTreeOf func() compTree

func init() { completionTreeOf = completionTree }

func completionTree() compTree {
	var t compTree
	sets := cli.AllFlagSets()
	cmdOf := func(name, summary string) compCommand {
		c := compCommand{name: name, summary: summary}
		if f := cli.FlagSetByName(sets, name); f != nil {
			c.flags = f.Docs()
		}
		if name == "completion" {
			c.args = completionShells
		}
		return c
	}
	for _, c := range commands {
		t.commands = append(t.commands, compCommand{name: c.name, summary: c.summary})
		switch c.name {
		case "help":
		case "dead":
			for _, d := range deadCommands {
				dc := cmdOf("dead "+d.name, d.summary)
				t.dead = append(t.dead, dc)
				t.withArgs = append(t.withArgs, dc)
			}
		default:
			t.withArgs = append(t.withArgs, cmdOf(c.name, c.summary))
		}
	}
	return t
}

func names(cs []compCommand, prefix string) []string {
	var out []string
	for _, c := range cs {
		out = append(out, strings.TrimPrefix(c.name, prefix))
	}
	return out
}

// shortUsage is the first clause of a flag's usage, for a shell's menu.
func shortUsage(s string) string {
	for _, sep := range []string{"; ", ": ", " ("} {
		if i := strings.Index(s, sep); i > 0 {
			s = s[:i]
		}
	}
	if len(s) > 70 {
		i := strings.LastIndex(s[:67], " ")
		if i < 20 {
			i = 67
		}
		s = s[:i] + "..."
	}
	return s
}

func writeBashCompletion(w io.Writer, t compTree) {
	cmds := strings.Join(names(t.commands, ""), " ")
	subs := strings.Join(names(t.dead, "dead "), " ")
	fmt.Fprintf(w, `# bash completion for outbox, written by 'outbox completion bash' from the
# binary's own commands and flags. Load it with: source <(outbox completion bash)
_outbox() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    # "--flag=value": bash splits the "=" off as a word of its own.
    if [[ $cur == "=" ]]; then
        cur=""
    elif [[ $prev == "=" && $COMP_CWORD -ge 3 ]]; then
        prev="${COMP_WORDS[COMP_CWORD-2]}"
    fi
    COMPREPLY=()
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W %[1]q -- "$cur"))
        [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--help --version" -- "$cur"))
        return
    fi
    local cmd="${COMP_WORDS[1]}"
    case "$cmd" in
    dead)
        if [[ $COMP_CWORD -eq 2 ]]; then
            COMPREPLY=($(compgen -W %[2]q -- "$cur"))
            return
        fi
        cmd="dead ${COMP_WORDS[2]}" ;;
    help)
        if [[ $COMP_CWORD -eq 2 ]]; then
            COMPREPLY=($(compgen -W %[1]q -- "$cur"))
        elif [[ $COMP_CWORD -eq 3 && ${COMP_WORDS[2]} == dead ]]; then
            COMPREPLY=($(compgen -W %[2]q -- "$cur"))
        fi
        return ;;
    esac
    local flags=""
    case "$cmd" in
`, cmds, subs)
	for _, c := range t.withArgs {
		fmt.Fprintf(w, "    %q)\n", c.name)
		writeBashValues(w, c)
		var flags []string
		for _, d := range c.flags {
			flags = append(flags, "--"+d.Name)
		}
		if len(c.args) > 0 && len(flags) == 0 {
			fmt.Fprintf(w, "        [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W %q -- \"$cur\"))\n        return ;;\n",
				strings.Join(c.args, " "))
			continue
		}
		fmt.Fprintf(w, "        flags=%q ;;\n", strings.Join(append(flags, "--help"), " "))
	}
	fmt.Fprint(w, `    *) return ;;
    esac
    if [[ -z $cur || $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    fi
}
complete -F _outbox outbox
`)
}

// writeBashValues writes the case on the previous word that completes the
// value of a flag: a file, a directory, one of its words, or nothing.
func writeBashValues(w io.Writer, c compCommand) {
	var files, dirs, other []string
	var enums []*cli.FlagDoc
	for _, d := range c.flags {
		pat := "--" + d.Name + "|-" + d.Name
		switch {
		case d.Placeholder == "":
		case d.TakesFile():
			files = append(files, pat)
		case d.TakesDir():
			dirs = append(dirs, pat)
		case d.Values() != nil:
			enums = append(enums, d)
		default:
			other = append(other, pat)
		}
	}
	if len(files)+len(dirs)+len(enums)+len(other) == 0 {
		return
	}
	fmt.Fprintf(w, "        case \"$prev\" in\n")
	if len(files) > 0 {
		fmt.Fprintf(w, "        %s)\n            compopt -o filenames 2>/dev/null\n            COMPREPLY=($(compgen -f -- \"$cur\"))\n            return ;;\n",
			strings.Join(files, "|"))
	}
	if len(dirs) > 0 {
		fmt.Fprintf(w, "        %s)\n            compopt -o filenames 2>/dev/null\n            COMPREPLY=($(compgen -d -- \"$cur\"))\n            return ;;\n",
			strings.Join(dirs, "|"))
	}
	for _, d := range enums {
		fmt.Fprintf(w, "        --%s|-%s)\n            COMPREPLY=($(compgen -W %q -- \"$cur\"))\n            return ;;\n",
			d.Name, d.Name, strings.Join(d.Values(), " "))
	}
	if len(other) > 0 {
		fmt.Fprintf(w, "        %s)\n            return ;;\n", strings.Join(other, "|"))
	}
	fmt.Fprintf(w, "        esac\n")
}

// zshQuote quotes s for a single-quoted zsh word.
func zshQuote(s string) string { return strings.ReplaceAll(s, "'", `'\''`) }

// zshDesc escapes s for the [description] of an _arguments spec and the
// description of a _describe entry.
func zshDesc(s string) string {
	return zshQuote(strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`, ":", `\:`).Replace(s))
}

func writeZshCompletion(w io.Writer, t compTree) {
	describe := func(cs []compCommand, prefix string) string {
		var b strings.Builder
		for _, c := range cs {
			fmt.Fprintf(&b, "    '%s:%s'\n", zshDesc(strings.TrimPrefix(c.name, prefix)), zshDesc(c.summary))
		}
		return b.String()
	}
	fmt.Fprintf(w, `#compdef outbox
# zsh completion for outbox, written by 'outbox completion zsh' from the
# binary's own commands and flags. Install it as _outbox in a directory of $fpath.
_outbox() {
  local -a cmds subs
  cmds=(
%s  )
  subs=(
%s  )
  if (( CURRENT == 2 )); then
    _describe -t commands 'outbox command' cmds
    return
  fi
  local cmd=$words[2]
  case $cmd in
  dead)
    if (( CURRENT == 3 )); then
      _describe -t commands 'outbox dead subcommand' subs
      return
    fi
    cmd="dead $words[3]"
    shift 2 words
    (( CURRENT -= 2 )) ;;
  help)
    if (( CURRENT == 3 )); then
      _describe -t commands 'outbox command' cmds
    elif (( CURRENT == 4 )) && [[ $words[3] == dead ]]; then
      _describe -t commands 'outbox dead subcommand' subs
    fi
    return ;;
  *)
    shift words
    (( CURRENT-- )) ;;
  esac
  case $cmd in
`, describe(t.commands, ""), describe(t.dead, "dead "))
	for _, c := range t.withArgs {
		fmt.Fprintf(w, "  '%s')\n    _arguments -S \\\n", zshQuote(c.name))
		for _, d := range c.flags {
			fmt.Fprintf(w, "      %s \\\n", zshFlagSpec(d))
		}
		if len(c.args) > 0 {
			fmt.Fprintf(w, "      '1:shell:(%s)' \\\n", strings.Join(c.args, " "))
		}
		fmt.Fprintf(w, "      '--help[print the usage]' ;;\n")
	}
	fmt.Fprint(w, `  esac
}
if [[ $funcstack[1] == _outbox ]]; then
  _outbox "$@"
else
  compdef _outbox outbox
fi
`)
}

func zshFlagSpec(d *cli.FlagDoc) string {
	desc := zshDesc(shortUsage(d.Usage))
	if d.Placeholder == "" {
		return fmt.Sprintf("'--%s[%s]'", d.Name, desc)
	}
	action := " "
	switch {
	case d.TakesFile():
		action = "_files"
	case d.TakesDir():
		action = "_files -/"
	case d.Values() != nil:
		action = "(" + strings.Join(d.Values(), " ") + ")"
	}
	return fmt.Sprintf("'--%s=[%s]:%s:%s'", d.Name, desc, zshDesc(d.Placeholder), action)
}

// fishQuote quotes s as a single-quoted fish string.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func writeFishCompletion(w io.Writer, t compTree) {
	fmt.Fprint(w, `# fish completion for outbox, written by 'outbox completion fish' from the
# binary's own commands and flags. Install it as ~/.config/fish/completions/outbox.fish.

# __outbox_cmd prints the command being completed: "", "relay", "dead list", ...
function __outbox_cmd
    set -l w (commandline -opc)
    if test (count $w) -lt 2
        return
    end
    if contains -- $w[2] dead help; and test (count $w) -ge 3
        echo "$w[2] $w[3]"
    else
        echo $w[2]
    end
end

function __outbox_is
    set -l c (__outbox_cmd)
    test "$c" = "$argv"
end

complete -c outbox -f
complete -c outbox -n '__outbox_is ""' -l help -d 'print the usage'
complete -c outbox -n '__outbox_is ""' -l version -d 'print the version'
`)
	for _, c := range t.commands {
		fmt.Fprintf(w, "complete -c outbox -n '__outbox_is \"\"' -a %s -d %s\n", fishQuote(c.name), fishQuote(c.summary))
		fmt.Fprintf(w, "complete -c outbox -n '__outbox_is help' -a %s -d %s\n", fishQuote(c.name), fishQuote(c.summary))
	}
	for _, c := range t.dead {
		sub := strings.TrimPrefix(c.name, "dead ")
		for _, parent := range []string{"dead", "help dead"} {
			fmt.Fprintf(w, "complete -c outbox -n '__outbox_is %s' -a %s -d %s\n", parent, fishQuote(sub), fishQuote(c.summary))
		}
	}
	for _, c := range t.withArgs {
		cond := fishQuote("__outbox_is " + fishQuote(c.name))
		for _, a := range c.args {
			fmt.Fprintf(w, "complete -c outbox -n %s -a %s\n", cond, fishQuote(a))
		}
		for _, d := range c.flags {
			fmt.Fprintf(w, "complete -c outbox -n %s -l %s%s -d %s\n", cond, d.Name, fishValue(d), fishQuote(shortUsage(d.Usage)))
		}
		fmt.Fprintf(w, "complete -c outbox -n %s -l help -d 'print the usage'\n", cond)
	}
}

// fishValue is the part of a complete line that says what value flag d
// takes.
func fishValue(d *cli.FlagDoc) string {
	switch {
	case d.Placeholder == "":
		return ""
	case d.TakesFile():
		return " -r -F"
	case d.TakesDir():
		return " -x -a '(__fish_complete_directories)'"
	case d.Values() != nil:
		return " -x -a " + fishQuote(strings.Join(d.Values(), " "))
	}
	return " -x"
}
