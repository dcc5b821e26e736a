package cloudevents_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

func TestUndeliverable(t *testing.T) {
	m := &outbox.Message{MsgID: "m-1"}
	err := cloudevents.Undeliverable("AMQP", m, "routing key", cloudevents.BytesProblem(strings.Repeat("x", 256), 255, "an AMQP short string"))
	var le *cloudevents.LimitError
	if !outbox.IsUndeliverable(err) || !errors.As(err, &le) || le.Field != "routing key" {
		t.Fatalf("%v: not an undeliverable LimitError", err)
	}
	if want := `undeliverable: AMQP cannot carry message "m-1": routing key is 256 bytes, over the 255 bytes of an AMQP short string`; err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err, want)
	}
}

func TestTextProblem(t *testing.T) {
	for _, tt := range []struct {
		s    string
		max  int
		want string
	}{
		{"ok", 2, ""},
		{"abc", 2, "is 3 bytes, over the 2 bytes of an MQTT string"},
		{"a\tb", 0, "control character U+0009"},
		{"a\xffb", 10, "not valid UTF-8"},
	} {
		got := cloudevents.TextProblem(tt.s, tt.max, "an MQTT string")
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("TextProblem(%q, %d) = %q, want %q", tt.s, tt.max, got, tt.want)
		}
	}
}

// HeaderLog logs a header that travels renamed or not at all once per name,
// whatever the number of messages that carry it, and nothing for
// well-formed names.
func TestHeaderLogOncePerName(t *testing.T) {
	var buf bytes.Buffer
	l := cloudevents.NewHeaderLog(slog.New(slog.NewTextHandler(&buf, nil)), "outboxtest")
	for range 3 {
		l.Check(&outbox.Message{MsgID: "m", Headers: map[string]string{"Trace-ID": "1", "type": "x", "tenant": "eu1"}})
	}
	l.Check(&outbox.Message{MsgID: "n", Headers: map[string]string{"tenant": "eu1", "Tenant": "eu2"}})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (Trace-ID, type, Tenant):\n%s", len(lines), buf.String())
	}
	for _, want := range []string{`header=Trace-ID sent_as=traceid`, `header=type msg_id=m`, `header=Tenant msg_id=n`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no %q in\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "header=tenant") {
		t.Errorf("a well-formed name was logged:\n%s", buf.String())
	}
	good := &outbox.Message{Headers: map[string]string{"tenant": "eu1", "traceparent": "00"}}
	if n := testing.AllocsPerRun(100, func() { l.Check(good) }); n > 0 {
		t.Errorf("Check of well-formed names: %v allocations", n)
	}
}
