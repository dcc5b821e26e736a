package outbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/outbox-go/outbox/outboxdriver"
)

func TestTablesQualified(t *testing.T) {
	for _, good := range []string{"events.outbox", "_s.t", "s1.outbox_2"} {
		if err := outboxdriver.ValidateIdentifier(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for _, bad := range []string{"a.b.c", ".outbox", "events.", "Events.outbox", "ev-s.outbox", `e"v.outbox`, "e v.outbox",
		"s.9x", "1s.outbox", strings.Repeat("s", 64) + ".outbox"} {
		if err := outboxdriver.ValidateIdentifier(bad); !errors.Is(err, ErrInvalidIdentifier) {
			t.Errorf("%q: %v, want ErrInvalidIdentifier", bad, err)
		}
	}
	if s, tb, q := outboxdriver.SplitTableName("events.outbox"); s != "events" || tb != "outbox" || !q {
		t.Errorf("SplitTableName(events.outbox) = %q, %q, %v", s, tb, q)
	}
	if s, tb, q := outboxdriver.SplitTableName("outbox"); s != "" || tb != "outbox" || q {
		t.Errorf("SplitTableName(outbox) = %q, %q, %v", s, tb, q)
	}
	// What a qualified outbox table brings with it clashes with an inbox of
	// the same qualified name.
	if err := (Tables{Outbox: "ev.ob", Inbox: "ev.ob_claims"}).Validate(); !errors.Is(err, ErrInvalidIdentifier) {
		t.Errorf("inbox ev.ob_claims beside outbox ev.ob: %v", err)
	}
	if err := (Tables{Outbox: "ev.ob", Inbox: "ev.inbox"}).Validate(); err != nil {
		t.Error(err)
	}
}
