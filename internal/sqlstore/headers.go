package sqlstore

import (
	"encoding/json"
	"strconv"
)

// DecodeHeaders decodes a headers column as the store reads it: NULL or
// "null" is no headers, values that are not strings keep their JSON text,
// and text that is no JSON object comes back under "outboxbadheaders". The
// change streams use it for the rows they decode.
func DecodeHeaders(b []byte) (map[string]string, error) { return decodeHeaders(b) }

func encodeHeaders(h map[string]string) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	// Text, not bytes: SQLite would store []byte as a BLOB.
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func decodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err == nil {
		return h, nil
	}
	// A sidecar writer may store values that are not strings ({"attempt": 2}):
	// keep them, as their JSON text.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		// Not an object at all: keep the message deliverable and say so in a
		// header of our own rather than drop what was written.
		return map[string]string{"outboxbadheaders": strconv.Quote(string(b))}, nil
	}
	h = make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			h[k] = s
		} else {
			h[k] = string(v)
		}
	}
	return h, nil
}
