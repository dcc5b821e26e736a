package outboxnats

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestPublisherDefaults(t *testing.T) {
	t.Parallel()
	st, err := PublisherConfig{URL: "nats://127.0.0.1:4222"}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if st.Source != "/outbox" || st.prefix != "outbox." || st.Stream != "OUTBOX" || st.Duplicates != 2*time.Minute ||
		st.MaxAge != 0 || st.streamConfig().MaxAge != 0 || st.Timeout != 5*time.Second || st.MemoryStorage {
		t.Errorf("defaults: %+v", st)
	}
}

func TestPublisherURLParameters(t *testing.T) {
	t.Parallel()
	st, err := PublisherConfig{URL: "nats://a:4222,nats://b:4222?subject=ev.{topic}&stream=EV&duplicates=5m&max_age=24h&storage=memory&timeout=2s&creds=/etc/x.creds"}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if st.prefix != "ev." || st.Stream != "EV" || st.Duplicates != 5*time.Minute || st.MaxAge != 24*time.Hour ||
		!st.MemoryStorage || st.Timeout != 2*time.Second || st.Credentials != "/etc/x.creds" {
		t.Errorf("from the URL: %+v", st)
	}
	if st.url.servers != "nats://a:4222,nats://b:4222" {
		t.Errorf("servers %q", st.url.servers)
	}
	// A field that is set wins over the URL.
	st, err = PublisherConfig{URL: "nats://a:4222?stream=EV&timeout=2s", Stream: "MINE", Timeout: time.Second}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if st.Stream != "MINE" || st.Timeout != time.Second {
		t.Errorf("config fields lost to the URL: stream %s timeout %s", st.Stream, st.Timeout)
	}
	// A negative max_age keeps messages for good.
	st, err = PublisherConfig{URL: "nats://a:4222?max_age=-1s"}.settings()
	if err != nil || st.streamConfig().MaxAge != 0 {
		t.Errorf("max_age=-1s: %v, %v", err, st)
	}
}

func TestSubscriberDefaults(t *testing.T) {
	t.Parallel()
	st, err := SubscriberConfig{URL: "nats://127.0.0.1:4222", Group: "billing"}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if st.filter != "outbox.>" || st.consumer != "billing" || st.deadPrefix != "outbox_dead." || st.Stream != "OUTBOX" ||
		st.DeadLetterStream != "OUTBOX_DEAD" || st.MaxDeliveries != 5 || st.AckWait != 30*time.Second ||
		st.RedeliveryDelay != time.Second || st.Prefetch != 16 || st.DeliverNew || st.Logger == nil {
		t.Errorf("defaults: %+v", st)
	}
	st, err = SubscriberConfig{
		URL:   "nats://h:4222?topic=order.paid&max_deliveries=3&dead=dl.{group}&dead_stream=DL&ack_wait=10s&redelivery_delay=2s&deliver=new&prefetch=4",
		Group: "billing",
	}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if st.filter != "outbox.order.paid" || st.MaxDeliveries != 3 || st.deadPrefix != "dl." || st.DeadLetterStream != "DL" ||
		st.AckWait != 10*time.Second || st.RedeliveryDelay != 2*time.Second || !st.DeliverNew || st.Prefetch != 4 {
		t.Errorf("from the URL: %+v", st)
	}
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	pub := []struct {
		url, want string
	}{
		{"", "the URL is empty"},
		{"http://h:4222", `scheme "http"`},
		{"nats://", "has no host"},
		{"nats://h:4222/x", "has a path"},
		{"nats://h:4222,", "empty server"},
		{"nats://h:4222?stram=X", `unknown URL parameter "stram"`},
		{"nats://h:4222?timeout=5", "timeout=\"5\" is not a duration"},
		{"nats://h:4222?subject=outbox", "must be a subject prefix followed by .{topic}"},
		{"nats://h:4222?subject={topic}", "must be a subject prefix followed by .{topic}"},
		{"nats://h:4222?subject=a.*.{topic}", `wildcard token "*"`},
		{"nats://h:4222?subject=a..b.{topic}", "empty token"},
		{"nats://h:4222?stream=A.B", "not a valid stream name"},
		{"nats://h:4222?duplicates=10m&max_age=1m", "longer than MaxAge"},
		{"nats://h:4222?storage=disk", "storage=file or storage=memory"},
		{"nats://h:4222?timeout=-1s", "must be positive"},
	}
	for _, tc := range pub {
		_, err := PublisherConfig{URL: tc.url}.settings()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PublisherConfig{URL: %q}: error %v, want one containing %q", tc.url, err, tc.want)
		}
	}
	sub := []struct {
		cfg  SubscriberConfig
		want string
	}{
		{SubscriberConfig{URL: "nats://h:4222"}, "Group is empty"},
		{SubscriberConfig{URL: "nats://h:4222", Group: strings.Repeat("g", 65)}, "longer than 64"},
		{SubscriberConfig{URL: "nats://h:4222", Group: "g", Topic: "a b"}, "whitespace"},
		{SubscriberConfig{URL: "nats://h:4222?dead=outbox.dead.{group}", Group: "g"}, "lies under the messages' subjects"},
		{SubscriberConfig{URL: "nats://h:4222?dead=dl.{topic}", Group: "g"}, "followed by .{group}"},
		{SubscriberConfig{URL: "nats://h:4222?dead_stream=OUTBOX", Group: "g"}, "need a stream of their own"},
		{SubscriberConfig{URL: "nats://h:4222?deliver=old", Group: "g"}, "deliver=all or deliver=new"},
		{SubscriberConfig{URL: "nats://h:4222?max_deliveries=x", Group: "g"}, "not a positive integer"},
		{SubscriberConfig{URL: "nats://h:4222", Group: "g", MaxDeliveries: -1}, "at least 1"},
		{SubscriberConfig{URL: "nats://h:4222?ack_wait=10ms", Group: "g"}, "at least 1s"},
	}
	for _, tc := range sub {
		_, err := tc.cfg.settings()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
}

// TestNoPasswordInErrors: a password or token never reaches an error.
func TestNoPasswordInErrors(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"http://user:s3cret@h:4222",
		"nats://s3cret@h:4222/path",
		"nats://user:s3cret@h:4222,",
		"nats://user:s3cret@h:4222,ftp://s3cret@h2",
	} {
		_, err := PublisherConfig{URL: raw}.settings()
		if err == nil {
			t.Errorf("%q: no error", raw)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: the error shows the secret: %v", raw, err)
		}
	}
	if got := redactServer("nats://user:pw@h:4222"); got != "nats://user:xxxxx@h:4222" {
		t.Errorf("redacted password: %q", got)
	}
	if got := redactServer("nats://tok@h:4222"); got != "nats://xxxxx@h:4222" {
		t.Errorf("redacted token: %q", got)
	}
}

func TestConsumerName(t *testing.T) {
	t.Parallel()
	for group, want := range map[string]string{
		"billing":      "billing",
		"Billing_v2-a": "Billing_v2-a",
	} {
		if got := ConsumerName(group); got != want {
			t.Errorf("ConsumerName(%q) = %q, want %q", group, got, want)
		}
	}
	a, b := ConsumerName("orders.eu"), ConsumerName("orders eu")
	if a == b || !strings.HasPrefix(a, "orders_eu_") || len(a) != len("orders_eu_")+8 {
		t.Errorf("ConsumerName: %q and %q", a, b)
	}
	if n := ConsumerName("größe"); strings.ContainsAny(n, "öß. *>") {
		t.Errorf("ConsumerName(größe) = %q", n)
	}
}

func TestSubjectMatching(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, sub string
		covers       bool
	}{
		{"outbox.>", "outbox.>", true},
		{">", "outbox.>", true},
		{"outbox.*", "outbox.>", false},
		{"outbox.>", "outbox", false},
		{"outbox.*.x", "outbox.a.x", true},
		{"other.>", "outbox.>", false},
	} {
		if got := subjectCovers(tc.pattern, tc.sub); got != tc.covers {
			t.Errorf("subjectCovers(%q, %q) = %v", tc.pattern, tc.sub, got)
		}
	}
	if !subjectsOverlap("outbox.>", "outbox.dead.>") || subjectsOverlap("outbox.>", "outbox_dead.>") || !subjectsOverlap("a.*", "a.b") {
		t.Error("subjectsOverlap")
	}
}

func TestEncodeValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"order-42:Paid": "order-42:Paid",
		"t ü/1":         "t%20%C3%BC/1",
		"100%":          "100%25",
		"a\r\nb":        "a%0D%0Ab",
	} {
		if got := encodeValue(in); got != want {
			t.Errorf("encodeValue(%q) = %q, want %q", in, got, want)
		}
		if back := decodeValue(encodeValue(in)); back != in {
			t.Errorf("decodeValue(encodeValue(%q)) = %q", in, back)
		}
	}
	// A producer that does not encode: an invalid escape is kept as it is.
	if got := decodeValue("50%off"); got != "50%off" {
		t.Errorf("decodeValue(50%%off) = %q", got)
	}
}

func FuzzEncodeValue(f *testing.F) {
	for _, s := range []string{"", "plain", "a b\"%", "Zürich", "\x00\r\n", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := encodeValue(s)
		for i := 0; i < len(enc); i++ {
			if c := enc[i]; c < 0x21 || c > 0x7e {
				t.Fatalf("encodeValue(%q) = %q has byte %#x", s, enc, c)
			}
		}
		if dec, err := url.PathUnescape(enc); err != nil || dec != s {
			t.Fatalf("PathUnescape(encodeValue(%q)) = %q, %v", s, dec, err)
		}
	})
}
