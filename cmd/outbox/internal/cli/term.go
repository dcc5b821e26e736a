package cli

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// EscapesNote is the help note of the commands that print stored text.
const EscapesNote = "Control characters in msg_ids, topics, keys, headers, payloads and last_errors (escape\n" +
	"sequences, C1 controls, bidirectional overrides) are shown as escapes such as \\x1b and \\u009b;\n" +
	"--json prints the stored text exactly, as JSON escapes. URLs in last_error have their\n" +
	"passwords, tokens and secret query values masked as xxxxx."

// TermText makes s, text from the database or a library, safe to print on
// a terminal: control characters (C0, DEL and C1, which include ESC and the
// one-byte CSI), the bidirectional-text overrides and isolates, the line and
// paragraph separators and invalid UTF-8 are written as Go escapes (\x1b,
// \n, \u009b, \u202e, \xff), so that a payload, a header or a last_error
// cannot move the cursor, rewrite the screen or the window's title, or hide
// text. Any other text, in any script, is printed as it is.
func TermText(s string) string { return escapeControls(s, false) }

// TermBlock is TermText for a block of lines, a payload: it keeps line
// feeds and tabs.
func TermBlock(s string) string { return escapeControls(s, true) }

func escapeControls(s string, block bool) string {
	if !needsEscape(s, block) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case block && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string, block bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && !(block && (c == '\n' || c == '\t')) || c == 0x7f {
			return true
		}
		if c >= 0x80 {
			// Decode from here on.
			for _, r := range s[i:] {
				if r == utf8.RuneError || r < 0x20 && !(block && (r == '\n' || r == '\t')) || r == 0x7f || unsafeRune(r) {
					return true
				}
			}
			return false
		}
	}
	return false
}

// unsafeRune reports a rune above DEL that a terminal acts on or that hides
// or reorders text: C1 controls, the bidirectional-text controls, and the
// line and paragraph separators.
func unsafeRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// JSONTermSafe rewrites the runes of JSON text that encoding/json leaves
// raw but a terminal acts on (DEL, C1 controls, bidirectional-text
// controls) as \u escapes, and an invalid UTF-8 byte as \ufffd. These can
// only stand inside strings, so the result is the same JSON value, valid,
// with the same data.
func JSONTermSafe(b []byte) []byte {
	if !needsEscape(string(b), true) {
		return b
	}
	var out bytes.Buffer
	out.Grow(len(b) + 16)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			out.WriteString(`\ufffd`)
		case r < 0x20 && r != '\n' && r != '\t', r == 0x7f, unsafeRune(r):
			fmt.Fprintf(&out, `\u%04x`, r)
		default:
			out.Write(b[i : i+size])
		}
		i += size
	}
	return out.Bytes()
}

// LogWriter is what the relay's logger writes to: it masks the secrets and
// credentials of each record (Scrub) and escapes what a terminal would act
// on. A slog handler writes each record in one call, so that a secret is
// never split across two. The text format already quotes a value with a
// control character; the JSON format leaves DEL and C1 raw, which become
// \u escapes here.
type LogWriter struct{ W io.Writer }

func (l LogWriter) Write(p []byte) (int, error) {
	if _, err := l.W.Write(JSONTermSafe([]byte(Scrub(string(p))))); err != nil {
		return 0, err
	}
	return len(p), nil
}
