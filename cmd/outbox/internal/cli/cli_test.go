package cli

import "testing"

func TestEnvName(t *testing.T) {
	t.Parallel()
	for flag, want := range map[string]string{"db": "OUTBOX_DB", "inbox-table": "OUTBOX_INBOX_TABLE", "webhook-secret": "OUTBOX_WEBHOOK_SECRET"} {
		if got := EnvName(flag); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", flag, got, want)
		}
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	in := "failed to connect to `user=postgres`:\n\thost: refused\n\thost: refused"
	if got, want := OneLine(in), "failed to connect to `user=postgres`: host: refused"; got != want {
		t.Errorf("oneLine = %q, want %q", got, want)
	}
}
