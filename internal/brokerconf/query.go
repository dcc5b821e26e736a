package brokerconf

import (
	"github.com/outbox-go/outbox/internal/suggest"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Query reads the query parameters of a broker URL into config fields. Each
// reader leaves a field that is already set alone (a config field wins over
// the URL) and refuses a value it cannot parse, naming the parameter.
type Query struct {
	values url.Values
	errf   func(format string, args ...any) error
}

// NewQuery returns a Query over values whose errors come from errf.
func NewQuery(values url.Values, errf func(format string, args ...any) error) *Query {
	if values == nil {
		values = url.Values{}
	}
	return &Query{values: values, errf: errf}
}

// Values returns the parameters.
func (q *Query) Values() url.Values { return q.values }

// Has reports whether the parameter is present.
func (q *Query) Has(name string) bool { return q.values.Has(name) }

// Get returns the parameter's last value, or "".
func (q *Query) Get(name string) string {
	vs := q.values[name]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// Check refuses a parameter that is not in known, suggesting the closest
// known name, and one given more than once.
func (q *Query) Check(known ...[]string) error {
	var all []string
	for _, k := range known {
		all = append(all, k...)
	}
	names := make([]string, 0, len(q.values))
	for name := range q.values {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !slices.Contains(all, name) {
			if s := Suggest(name, all); s != "" {
				return q.errf("unknown URL parameter %q; did you mean %q? (the package documentation lists the parameters)", name, s)
			}
			return q.errf("unknown URL parameter %q; the package documentation lists the parameters", name)
		}
		if len(q.values[name]) > 1 {
			return q.errf("URL parameter %q is given %d times; give it once", name, len(q.values[name]))
		}
	}
	return nil
}

// String sets *dst to the first present parameter of names when *dst is "".
func (q *Query) String(dst *string, names ...string) {
	if *dst != "" {
		return
	}
	for _, name := range names {
		if q.Has(name) {
			*dst = q.Get(name)
			return
		}
	}
}

// Int sets *dst from a positive integer parameter when *dst is 0.
func (q *Query) Int(dst *int, name string) error {
	var n int64
	if *dst != 0 {
		return nil
	}
	if err := q.Int64(&n, name); err != nil {
		return err
	}
	*dst = int(n)
	return nil
}

// Int64 sets *dst from a positive integer parameter when *dst is 0.
func (q *Query) Int64(dst *int64, name string) error {
	if *dst != 0 || !q.Has(name) {
		return nil
	}
	v := q.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > int64(^uint(0)>>1) {
		return q.errf("URL parameter %s=%q is not a positive integer", name, v)
	}
	*dst = n
	return nil
}

// Duration sets *dst from a positive duration parameter ("500ms", "10s")
// when *dst is 0.
func (q *Query) Duration(dst *time.Duration, name string) error {
	if *dst != 0 || !q.Has(name) {
		return nil
	}
	v := q.Get(name)
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return q.errf("URL parameter %s=%q is not a positive duration; use e.g. %s=10s", name, v, name)
	}
	*dst = d
	return nil
}

// SignedDuration is Duration for a parameter where a negative value has a
// meaning of its own (such as "none").
func (q *Query) SignedDuration(dst *time.Duration, name string) error {
	if *dst != 0 || !q.Has(name) {
		return nil
	}
	v := q.Get(name)
	d, err := time.ParseDuration(v)
	if err != nil {
		return q.errf("URL parameter %s=%q is not a duration; use e.g. %s=10s", name, v, name)
	}
	*dst = d
	return nil
}

// Bool sets *dst from a true/false parameter when *dst is false. A config
// field cannot turn off what the URL turns on; take the config from the
// adapter's ParseURL and change the field there instead.
func (q *Query) Bool(dst *bool, name string) error {
	if *dst || !q.Has(name) {
		return nil
	}
	v := q.Get(name)
	b, err := strconv.ParseBool(v)
	if err != nil {
		return q.errf("URL parameter %s=%q is not true or false", name, v)
	}
	*dst = b
	return nil
}

// Without returns raw with the query parameters for which drop is true
// removed, keeping the rest (which a client library may read itself). Only
// the part after the last "?" is touched, so a comma-separated server list
// before it is kept as it is.
func Without(raw string, drop func(name string) bool) string {
	i := strings.LastIndexByte(raw, '?')
	if i < 0 {
		return raw
	}
	values, err := url.ParseQuery(raw[i+1:])
	if err != nil {
		return raw
	}
	for name := range values {
		if drop(name) {
			delete(values, name)
		}
	}
	if len(values) == 0 {
		return raw[:i]
	}
	return raw[:i+1] + values.Encode()
}

// Suggest returns the name of known closest to name, when one is close
// enough to be a likely typo, or "".
func Suggest(name string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := suggest.Distance(strings.ToLower(name), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		for _, k := range known {
			if len(name) >= 3 && (strings.HasPrefix(k, name) || strings.HasPrefix(name, k)) {
				return k
			}
		}
	}
	return best
}
