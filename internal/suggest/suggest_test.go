package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"batch", "batch", 0}, {"bach", "batch", 1}, {"batch", "bach", 1},
		{"kitten", "sitting", 3}, {"", "abc", 3}, {"tls_ca", "tls-ca", 1},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
