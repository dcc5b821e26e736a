package sqlstore

// DecodeHeaders decodes a headers column as the store reads it: NULL or
// "null" is no headers, values that are not strings keep their JSON text,
// and text that is no JSON object comes back under "outboxbadheaders". The
// change streams use it for the rows they decode.
func DecodeHeaders(b []byte) (map[string]string, error) { return decodeHeaders(b) }
