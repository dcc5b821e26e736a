package benchbaseline

import (
	"context"
	"testing"
	"time"
)

func TestRegisterLookup(t *testing.T) {
	fn := func(context.Context, string, string, int, int, int) (time.Duration, error) { return time.Second, nil }
	Register("test-a", fn)
	Register("Test-B", fn)
	for _, s := range []string{"test-a", "TEST-A", "test-b"} {
		got, ok := Lookup(s)
		if !ok {
			t.Fatalf("Lookup(%q): none", s)
		}
		if d, _ := got(context.Background(), "", "", 0, 0, 0); d != time.Second {
			t.Errorf("Lookup(%q) is not the registered Func", s)
		}
	}
	if _, ok := Lookup("test-c"); ok {
		t.Error("Lookup of a scheme never registered found one")
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	fn := func(context.Context, string, string, int, int, int) (time.Duration, error) { return 0, nil }
	Register("test-twice", fn)
	for name, register := range map[string]func(){
		"same scheme": func() { Register("TEST-TWICE", fn) },
		"nil Func":    func() { Register("test-nil", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			register()
		}()
	}
}
