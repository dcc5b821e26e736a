package brokerconf

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

var errTest = errors.New("test: bad configuration")

func TestQuery(t *testing.T) {
	t.Parallel()
	v, _ := url.ParseQuery("n=3&d=2s&b=true&s=x&bad=-1&neg=-5s")
	q := NewQuery(v, Errorf("test", errTest))
	n, d, b, s := 7, time.Duration(0), false, ""
	if err := q.Int(&n, "n"); err != nil || n != 7 {
		t.Fatalf("Int over a set field: %d, %v (the field must win)", n, err)
	}
	n = 0
	if err := q.Int(&n, "n"); err != nil || n != 3 {
		t.Fatalf("Int = %d, %v", n, err)
	}
	if err := q.Duration(&d, "d"); err != nil || d != 2*time.Second {
		t.Fatalf("Duration = %s, %v", d, err)
	}
	if err := q.Bool(&b, "b"); err != nil || !b {
		t.Fatalf("Bool = %v, %v", b, err)
	}
	q.String(&s, "missing", "s")
	if s != "x" {
		t.Fatalf("String with an alias = %q", s)
	}
	var bad int
	if err := q.Int(&bad, "bad"); !errors.Is(err, errTest) || !strings.HasPrefix(err.Error(), "test: ") {
		t.Fatalf("Int of -1 = %v, want the package's config error", err)
	}
	var neg time.Duration
	if err := q.Duration(&neg, "neg"); err == nil {
		t.Fatal("Duration accepted -5s")
	}
	if err := q.SignedDuration(&neg, "neg"); err != nil || neg != -5*time.Second {
		t.Fatalf("SignedDuration = %s, %v", neg, err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	errf := Errorf("test", errTest)
	v, _ := url.ParseQuery("strem=x")
	err := NewQuery(v, errf).Check([]string{"stream", "topic"}, TLSParams)
	if err == nil || !strings.Contains(err.Error(), `did you mean "stream"?`) {
		t.Fatalf("Check = %v", err)
	}
	v, _ = url.ParseQuery("zzz=1")
	if err := NewQuery(v, errf).Check([]string{"stream"}); err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("Check of a name close to nothing = %v", err)
	}
	v, _ = url.ParseQuery("stream=a&stream=b")
	if err := NewQuery(v, errf).Check([]string{"stream"}); err == nil || !strings.Contains(err.Error(), "2 times") {
		t.Fatalf("Check of a repeated parameter = %v", err)
	}
}

func TestWithout(t *testing.T) {
	t.Parallel()
	got := Without("nats://a:1,nats://b:2?stream=X&creds=f", func(n string) bool { return n == "stream" })
	if got != "nats://a:1,nats://b:2?creds=f" {
		t.Fatalf("Without = %q", got)
	}
	if got := Without("redis://h?x=1", func(string) bool { return true }); got != "redis://h" {
		t.Fatalf("Without all = %q", got)
	}
}

func TestTLSFilesErrors(t *testing.T) {
	t.Parallel()
	errf := Errorf("test", errTest)
	for _, tc := range []struct {
		files TLSFiles
		want  string
	}{
		{TLSFiles{CA: "/nonexistent/ca.pem"}, `tls_ca "/nonexistent/ca.pem" cannot be read: no such file`},
		{TLSFiles{Cert: "c.pem"}, "tls_cert and tls_key go together"},
		{TLSFiles{CA: "brokerconf_test.go"}, "holds no PEM certificate"},
	} {
		if _, err := tc.files.Config(errf); !errors.Is(err, errTest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.files, err, tc.want)
		}
	}
	cfg, err := ResolveTLS(nil, TLSFiles{ServerName: "h"}, false, errf)
	if err != nil || cfg == nil || cfg.ServerName != "h" {
		t.Fatalf("ResolveTLS with a server name = %+v, %v", cfg, err)
	}
	if cfg, err := ResolveTLS(nil, TLSFiles{}, false, errf); cfg != nil || err != nil {
		t.Fatalf("ResolveTLS with nothing = %+v, %v, want nil", cfg, err)
	}
}
