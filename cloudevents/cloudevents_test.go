package cloudevents

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

func TestExtensions(t *testing.T) {
	t.Parallel()
	got := Extensions(map[string]string{
		"traceparent":  "tp",
		"Trace-ID":     "loses to the well-formed name",
		"traceid":      "wins",
		"X_Tenant":     "first in sorted order",
		"x-tenant":     "second in sorted order",
		"spec.version": "reserved once normalised",
		"ID":           "reserved once lower-cased",
		"partitionkey": "reserved",
		"日本":           "nothing left",
		"":             "empty",
	})
	want := []Attribute{
		{"traceid", "wins"},
		{"xtenant", "first in sorted order"},
		{"traceparent", "tp"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Extensions = %v, want %v", got, want)
	}
	if got := Extensions(nil); got != nil {
		t.Errorf("Extensions(nil) = %v, want nil", got)
	}
}

func TestAttributesRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 30, 4, 5, 6, 789123000, time.FixedZone("CET", 3600))
	m := outbox.Message{
		MsgID:     "order-42:paid",
		Topic:     "order.paid",
		Key:       "order-42",
		Payload:   json.RawMessage(`{"amount":100,"note":"größer"}`),
		Headers:   map[string]string{"traceparent": "00-abc-def-01", "tenant": "ü"},
		CreatedAt: created,
	}
	attrs := Attributes(&m, "")
	wantOrder := []string{SpecVersion, ID, Source, Type, Time, PartitionKey, "tenant", "traceparent"}
	got := make(map[string]string)
	for i, a := range attrs {
		if a.Name != wantOrder[i] {
			t.Fatalf("attribute %d is %q, want %q (all: %v)", i, a.Name, wantOrder[i], attrs)
		}
		got[a.Name] = a.Value
	}
	if got[Source] != DefaultSource || got[Time] != "2026-11-30T03:05:06.789123Z" {
		t.Errorf("source, time = %q, %q", got[Source], got[Time])
	}
	back, err := Decode(got, m.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if back.MsgID != m.MsgID || back.Topic != m.Topic || back.Key != m.Key ||
		string(back.Payload) != string(m.Payload) || !back.CreatedAt.Equal(created) ||
		!reflect.DeepEqual(back.Headers, m.Headers) {
		t.Errorf("Decode(Attributes(m)) = %+v, want %+v", back, m)
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	ok := map[string]string{SpecVersion: "1.0", ID: "m-1", Type: "t"}
	with := func(k, v string) map[string]string {
		a := map[string]string{}
		for n, x := range ok {
			a[n] = x
		}
		if v == "" {
			delete(a, k)
		} else {
			a[k] = v
		}
		return a
	}
	cases := map[string]struct {
		attrs map[string]string
		body  string
	}{
		"no id":      {with(ID, ""), `{}`},
		"no type":    {with(Type, ""), `{}`},
		"spec 0.3":   {with(SpecVersion, "0.3"), `{}`},
		"bad time":   {with(Time, "yesterday"), `{}`},
		"not json":   {ok, `{"a":`},
		"empty body": {ok, ``},
		"xml":        {with(ContentType, "application/xml"), `{}`},
		"nil attrs":  {nil, `{}`},
	}
	for name, c := range cases {
		if _, err := Decode(c.attrs, []byte(c.body)); !errors.Is(err, ErrNotEvent) {
			t.Errorf("%s: Decode error = %v, want ErrNotEvent", name, err)
		}
	}
	if _, err := Decode(with(ContentType, "application/json; charset=utf-8"), []byte(`[1]`)); err != nil {
		t.Errorf("JSON with charset: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("m-1", "t", "k", "2026-01-02T03:04:05Z", `{"a":1}`)
	f.Fuzz(func(t *testing.T, id, typ, key, tm, body string) {
		m, err := Decode(map[string]string{ID: id, Type: typ, PartitionKey: key, Time: tm}, []byte(body))
		if err != nil {
			if !errors.Is(err, ErrNotEvent) {
				t.Fatalf("error %v does not wrap ErrNotEvent", err)
			}
			return
		}
		if m.MsgID != id || m.Topic != typ || !json.Valid(m.Payload) {
			t.Fatalf("Decode gave %+v", m)
		}
	})
}

func TestPercentEncode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"order-42:paid":        "order-42:paid",
		"größe 10%":            "gr%C3%B6%C3%9Fe%2010%25",
		"say \"hi\"\r\n":       "say%20%22hi%22%0D%0A",
		"2026-11-30T12:00:00Z": "2026-11-30T12:00:00Z",
	} {
		got := PercentEncode(in)
		if got != want {
			t.Errorf("PercentEncode(%q) = %q, want %q", in, got, want)
		}
		if back := PercentDecode(got); back != in {
			t.Errorf("PercentDecode(%q) = %q, want %q", got, back, in)
		}
	}
	if got := PercentDecode("100%"); got != "100%" {
		t.Errorf("PercentDecode of an unencoded value = %q", got)
	}
}

// RowAttributes names every attribute Attributes sets other than the
// extensions, in Attributes' order.
func TestRowAttributes(t *testing.T) {
	t.Parallel()
	m := &outbox.Message{MsgID: "m1", Topic: "t", Key: "k", CreatedAt: time.Now(), Headers: map[string]string{"traceid": "x"}}
	var got []string
	for _, a := range Attributes(m, "") {
		if a.Name != "traceid" {
			got = append(got, a.Name)
		}
	}
	if want := RowAttributes(); !slices.Equal(got, want) {
		t.Fatalf("Attributes set %v from the row; RowAttributes says %v", got, want)
	}
}
