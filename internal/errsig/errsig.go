// Package errsig reduces an error text to a signature: the part that two
// messages refused for the same reason share.
package errsig

import "strings"

// MaxLen is the most bytes a signature keeps.
const MaxLen = 256

// Of returns text with every occurrence of each non-empty value of own (a
// message's msg_id, topic and key) replaced by "\x01" and every run of
// digits by "#", cut at MaxLen bytes.
func Of(text string, own ...string) string {
	for _, v := range own {
		if v != "" {
			text = strings.ReplaceAll(text, v, "\x01")
		}
	}
	var b strings.Builder
	digits := false
	for _, r := range text {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
		if b.Len() >= MaxLen {
			break
		}
	}
	return b.String()
}
