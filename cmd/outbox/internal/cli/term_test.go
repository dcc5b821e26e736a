package cli

import (
	"encoding/json"
	"testing"
)

func TestTermText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain order.paid":        "plain order.paid",
		"ünïcödé 日本 😀":            "ünïcödé 日本 😀",
		"\x1b[31mred\x1b[0m":      `\x1b[31mred\x1b[0m`,
		"\x1b]0;title\x07":        `\x1b]0;title\x07`,
		"a\r\nb\tc":               `a\r\nb\tc`,
		"del\x7f":                 `del\x7f`,
		"c1 \u009b31m \u0085":     `c1 \u009b31m \u0085`,
		"bidi \u202eevil\u2066":   `bidi \u202eevil\u2066`,
		"sep\u2028x":              `sep\u2028x`,
		"bad \xff\xfe utf8":       `bad \xff\xfe utf8`,
		"backslash \\x1b is text": `backslash \x1b is text`,
	} {
		if got := TermText(in); got != want {
			t.Errorf("TermText(%q) = %q, want %q", in, got, want)
		}
	}
	if got := TermBlock("{\n\t\"a\": \"\x1b[2J\"\n}"); got != "{\n\t\"a\": \"\\x1b[2J\"\n}" {
		t.Errorf("TermBlock kept or lost the wrong characters: %q", got)
	}
}

func TestJSONTermSafe(t *testing.T) {
	t.Parallel()
	in := map[string]string{"esc": "\x1b[2J", "c1": "\u009b1m", "del": "a\x7fb", "bidi": "\u202e", "text": "ünïcödé"}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := JSONTermSafe(raw)
	for _, r := range string(out) {
		if r < 0x20 || r >= 0x7f && r <= 0x9f || r == 0x202e {
			t.Fatalf("raw %U left in %s", r, out)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	for k, v := range in {
		if back[k] != v {
			t.Errorf("%s: %q, want %q", k, back[k], v)
		}
	}
}
