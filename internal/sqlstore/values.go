package sqlstore

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// timeValue scans a timestamp from any driver: time.Time (PostgreSQL, MySQL
// with parseTime) or text (SQLite, MySQL without parseTime).
type timeValue struct {
	Time  time.Time
	Valid bool
}

// timeLayouts are the forms a time column may hold: the drivers' and
// SQLite's own (strftime, CURRENT_TIMESTAMP), and the shorter ones SQLite's
// date functions also accept, which a sidecar may write.
var timeLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04",
	"2006-01-02T15:04",
	"2006-01-02 15:04Z07:00",
	"2006-01-02T15:04Z07:00",
	"2006-01-02",
}

func (t *timeValue) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*t = timeValue{}
		return nil
	case time.Time:
		*t = timeValue{Time: v.UTC(), Valid: true}
		return nil
	case []byte:
		return t.parse(string(v))
	case string:
		return t.parse(v)
	case int64:
		return t.number(float64(v))
	case float64:
		return t.number(v)
	}
	return fmt.Errorf("outbox: cannot read %T as a time", src)
}

// number reads v the way SQLite's date functions do with their 'auto'
// modifier: from 0 up to 5373484.5 it is a Julian day number, anything else
// Unix seconds. Only a sidecar that writes a time column of a SQLite table
// itself, as a number, stores one.
func (t *timeValue) number(v float64) error {
	const unixEpochJulianDay = 2440587.5
	if v >= 0 && v < 5373484.5 {
		v = (v - unixEpochJulianDay) * 86400
	}
	// Years 1 to 9999, as SQLite's date functions.
	if !(v >= -62135596800 && v < 253402300800) {
		return fmt.Errorf("outbox: cannot read %v as a time", v)
	}
	sec, frac := math.Modf(v)
	*t = timeValue{Time: time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC(), Valid: true}
	return nil
}

// lenientTime reads a row's time column. A value that is no time at all
// (text a sidecar wrote into a SQLite table, whose columns take anything)
// reads as no time: the message is still published, with no CloudEvents
// time attribute, instead of failing every claim that meets the row and so
// holding up every message behind it; and stats and dead list/show still
// work on it, showing no time.
type lenientTime struct{ timeValue }

func (t *lenientTime) Scan(src any) error {
	if err := t.timeValue.Scan(src); err != nil {
		t.timeValue = timeValue{}
	}
	return nil
}

func (t *timeValue) parse(s string) error {
	for _, l := range timeLayouts {
		if tm, err := time.Parse(l, s); err == nil {
			*t = timeValue{Time: tm.UTC(), Valid: true}
			return nil
		}
	}
	// A number in a SQLite column of TEXT affinity comes back as text.
	if v, err := strconv.ParseFloat(s, 64); err == nil && t.number(v) == nil {
		return nil
	}
	return fmt.Errorf("outbox: cannot parse time %q", s)
}

// textValue scans a nullable text column from any driver.
type textValue struct{ s string }

func (n *textValue) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		n.s = ""
	case string:
		n.s = v
	case []byte:
		n.s = string(v)
	case int64, uint64, float64, bool:
		n.s = fmt.Sprint(v)
	default:
		return fmt.Errorf("outbox: cannot read %T as text", src)
	}
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func jsonArray[T any](v []T) string {
	if len(v) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
