package redact

import (
	"slices"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		secrets  []string // parts that must not survive
	}{
		// Userinfo.
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222", nil},
		{"nats://s3cr3t-token@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222", []string{"s3cr3t-token"}},
		{"nats://user:pa55word@h:4222", "nats://user:xxxxx@h:4222", []string{"pa55word"}},
		{"nats://tok1@h1:4222,nats://u:pw2x@h2:4222?stream=S", "nats://xxxxx@h1:4222,nats://u:xxxxx@h2:4222?stream=S", []string{"tok1", "pw2x"}},
		{"https://ghp_abcdef@api.example.com/hook", "https://xxxxx@api.example.com/hook", []string{"ghp_abcdef"}},
		{"postgres://app@127.0.0.1:5432/db", "postgres://app@127.0.0.1:5432/db", nil},
		{"mysql://root@127.0.0.1:3306/db", "mysql://root@127.0.0.1:3306/db", nil},
		{"redis://:r3dis-pw@h:6379/0", "redis://:xxxxx@h:6379/0", []string{"r3dis-pw"}},
		{"amqp://guest:gu3st-pw@h:5672/", "amqp://guest:xxxxx@h:5672/", []string{"gu3st-pw"}},
		// Passwords with the characters that end an authority, or start one.
		{"mysql://u:p4/a?b#c@host:3306/db", "mysql://xxxxx@host:3306/db", []string{"p4", "a?b", "#c"}},
		{"mysql://u:1234/abc@host:3306/db", "mysql://xxxxx@host:3306/db", []string{"1234", "abc"}},
		{"postgres://u:p@ss@w0rd@host:5432/db", "postgres://u:xxxxx@host:5432/db", []string{"p@ss", "w0rd"}},
		{"postgres://u:pa:ss:wd@host/db", "postgres://u:xxxxx@host/db", []string{"pa:ss", "ss:wd"}},
		{"postgres://u:pa%2Fss%40wd@host/db", "postgres://u:xxxxx@host/db", []string{"pa%2F", "ss%40wd"}},
		{"nats://to#ken@host:4222", "nats://xxxxx@host:4222", []string{"to#ken", "ken"}},
		{"nats://to/ken@host:4222", "nats://xxxxx@host:4222", []string{"to/ken", "ken"}},
		// Secret query parameters, in any case, encoded or not.
		{"https://h/hook?token=t0k3n&topic=a", "https://h/hook?token=xxxxx&topic=a", []string{"t0k3n"}},
		{"https://h/hook?access_token=AT1&api_key=AK1&key=K1&sig=S1&signature=SG1&password=PW1&auth=AU1&secret=SE1&x=1",
			"https://h/hook?access_token=xxxxx&api_key=xxxxx&key=xxxxx&sig=xxxxx&signature=xxxxx&password=xxxxx&auth=xxxxx&secret=xxxxx&x=1",
			[]string{"AT1", "AK1", "K1", "S1", "SG1", "PW1", "AU1", "SE1"}},
		{"https://h/hook?Token=Abc123&X-Amz-Signature=dead%2Fbeef", "https://h/hook?Token=xxxxx&X-Amz-Signature=xxxxx", []string{"Abc123", "dead"}},
		{"https://h/hook?%74oken=enc0ded", "https://h/hook?%74oken=xxxxx", []string{"enc0ded"}},
		{"https://h/hook#access_token=fr4g", "https://h/hook#access_token=xxxxx", []string{"fr4g"}},
		{"amqp://h/?exchange=e&routing_key={topic}", "amqp://h/?exchange=e&routing_key={topic}", nil},
		{"https://u:pw9@h/hook?token=t9", "https://u:xxxxx@h/hook?token=xxxxx", []string{"pw9", "t9"}},
		// An "@" in the query: masked up to it, and the parameters after it.
		{"https://h/hook?email=a@b.example&token=t8", "https://xxxxx@b.example&token=xxxxx", []string{"t8"}},
		// go-sql-driver DSNs.
		{"root@tcp(127.0.0.1:3306)/db", "root@tcp(127.0.0.1:3306)/db", nil},
		{"app:s3cret@tcp(h:3306)/db", "app:xxxxx@tcp(h:3306)/db", []string{"s3cret"}},
		{"app:p/a?b#c@d:e@tcp(h:3306)/db", "app:xxxxx@tcp(h:3306)/db", []string{"p/a", "b#c", "d:e"}},
		{"tok3n@host:4222", "xxxxx@host:4222", []string{"tok3n"}},
		{"app:pw@tcp(h)/db?tls=true&password=pw2x", "app:xxxxx@tcp(h)/db?tls=true&password=xxxxx", []string{"pw2x"}},
		// A relative reference, as a Location header may be.
		{"/final/hook?token=loc4tion", "/final/hook?token=xxxxx", []string{"loc4tion"}},
		// The placeholders of examples.
		{"postgres://user:pass@host:5432/db", "postgres://user:pass@host:5432/db", nil},
		{"user:pass@tcp(host:3306)/db", "user:pass@tcp(host:3306)/db", nil},
		// No credentials.
		{"sqlite:data/app.db", "sqlite:data/app.db", nil},
		{"discard:", "discard:", nil},
	} {
		got := URL(tc.in)
		if got != tc.want {
			t.Errorf("URL(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
		for _, s := range tc.secrets {
			if strings.Contains(got, s) {
				t.Errorf("URL(%q) = %q keeps %q", tc.in, got, s)
			}
		}
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`webhook: POST https://h/p?token=abc: 503 Service Unavailable`, `webhook: POST https://h/p?token=xxxxx: 503 Service Unavailable`},
		{`Post "https://u:pw@h/p?sig=1f": dial tcp: refused`, `Post "https://u:xxxxx@h/p?sig=xxxxx": dial tcp: refused`},
		{`level=INFO msg="relay started" broker=nats://tok@h:4222 batch=500`, `level=INFO msg="relay started" broker=nats://xxxxx@h:4222 batch=500`},
		{`{"broker":"nats://a:b@h1,nats://tok@h2?stream=S","x":1}`, `{"broker":"nats://a:xxxxx@h1,nats://xxxxx@h2?stream=S","x":1}`},
		{`see (https://h/x?api_key=k1).`, `see (https://h/x?api_key=xxxxx).`},
		{`dsn app:pw@tcp(h:3306)/db failed`, `dsn app:xxxxx@tcp(h:3306)/db failed`},
		{`no urls here: a@b, key=value`, `no urls here: a@b, key=value`},
		{`retried by operator; previous error: POST https://h/p?token=old1: 500`, `retried by operator; previous error: POST https://h/p?token=xxxxx: 500`},
		{"", ""},
	} {
		if got := Text(tc.in); got != tc.want {
			t.Errorf("Text(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestTextIsIdempotent(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"mysql://u:p/a?b#c@host:3306/db", "https://h/hook?token=t&x=1", "nats://tok@h1,nats://u:p@h2", "a:b@tcp(h)/d",
	} {
		once := Text(s)
		if twice := Text(once); twice != once {
			t.Errorf("Text(Text(%q)) = %q, want %q", s, twice, once)
		}
	}
}

func TestSecretParam(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"token", "TOKEN", "access_token", "access-token", "refresh_token", "X-Amz-Security-Token", "key",
		"api_key", "apiKey", "api-key", "secret", "client_secret", "signature", "sig", "password", "passwd", "pwd", "pass",
		"auth", "Authorization", "basic_auth", "private_key", "credential", "jwt", "_auth_pass", "db_pwd"} {
		if !SecretParam(n) {
			t.Errorf("SecretParam(%q) = false", n)
		}
	}
	for _, n := range []string{"topic", "stream", "subject", "routing_key", "binding_key", "exchange", "source", "timeout",
		"auth_mechanism", "session_timeout", "keyfile", "creds", "key_prefix", ""} {
		if SecretParam(n) {
			t.Errorf("SecretParam(%q) = true", n)
		}
	}
}

func TestSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"nats://tok3n@h:4222", []string{"tok3n"}},
		{"nats://user:pa%2Fss@h:4222", []string{"pa%2Fss", "pa/ss"}},
		{"https://h/hook?token=t%2Bk1&x=1", []string{"t%2Bk1", "t+k1"}},
		{"mysql://u:p4/a?b#c@host:3306/db", []string{"p4/a?b#c"}},
		{"mysql://u:1234/abc@host:3306/db", []string{"1234/abc", "1234"}},
		{"mysql://root@h:3306/db", nil},
		{"app:s3cret@tcp(h)/db", []string{"s3cret"}},
		{"root@tcp(h)/db", nil},
		{"nats://a:pw1x@h1,nats://tok2@h2", []string{"pw1x", "tok2"}},
	} {
		got := Secrets(tc.in)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("Secrets(%q) = %q, lacks %q", tc.in, got, w)
			}
		}
		if len(tc.want) == 0 && len(got) != 0 {
			t.Errorf("Secrets(%q) = %q, want none", tc.in, got)
		}
	}
}
