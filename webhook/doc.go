// Package webhook publishes outbox messages to an HTTP endpoint, one POST per
// message, following the CloudEvents HTTP binding in binary mode (DESIGN §4).
// It implements outbox.Publisher and uses only the standard library.
//
// # On the wire
//
// The body is the message's payload, byte for byte, with Content-Type
// application/json. The event's attributes travel as headers:
//
//	ce-specversion:  1.0
//	ce-id:           msg_id
//	ce-type:         topic
//	ce-source:       Config.Source ("/outbox" by default)
//	ce-time:         created_at, RFC 3339 in UTC (omitted when unknown)
//	ce-partitionkey: msg_key (only when set)
//	ce-<name>:       one per row header
//	Idempotency-Key: msg_id
//	webhook-id:        msg_id, as Idempotency-Key (only with Config.Secret)
//	webhook-timestamp: Unix seconds of the attempt (only with Config.Secret)
//	webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">, one per secret (only with Config.Secret)
//	X-Outbox-Signature-256: sha256=<hex HMAC-SHA256 of the body> (only with Config.LegacySignature)
//
// Header values are percent-encoded as the binding requires (bytes outside
// printable ASCII, space, '"' and '%'), so a receiver decodes them with
// url.PathUnescape. Row header names are lower-cased and reduced to letters
// and digits; names that end up empty or equal to an attribute set above are
// skipped.
//
// # Acknowledgement and failures
//
// Any 2xx status acknowledges the message. Receivers should deduplicate by
// ce-id (or Idempotency-Key): the outbox delivers at least once.
//
// A failure either means the endpoint cannot take messages right now, or that
// it refused this one. The test is whether every message would get the same
// answer. The first kind satisfies outbox.IsUnavailable, and the relay pauses
// without spending the message's retries: a connection that cannot be made
// (dial, DNS, TLS, reset, or no connection within Config.Timeout), the
// caller's ctx ending, and the statuses that concern the endpoint rather than
// the message: every 3xx (redirects are not followed; set Config.URL to the
// final address), 401, 403 and 407 (credentials), 404, 405, 410 and 414 (the
// URL), 406, 408, 411, 421, 425, 426, 428, 429, and every 5xx except 500.
// Were they refusals, a wrong path or an expired token would park every
// message as DEAD within minutes. A Retry-After header on such an answer, in
// seconds or as an HTTP-date, is parsed (StatusError.RetryDelay) and carried
// for outbox.RetryAfter: the relay then pauses at least that long, but no
// longer than RelayConfig.PauseMax. A message held back behind a failed one
// of the same key (ErrHeldBack) is left untouched too; it adds no pause of
// its own.
//
// The second kind spends a retry: the statuses that concern the message (400,
// 409, 413, 415, 422, 431 and any other 4xx, and 500, which a receiver's
// framework answers when its handler fails, maybe on this very payload), as a
// *StatusError whose message quotes the start of the response body, and a
// request that got no response within Config.Timeout although the connection
// was made, because the endpoint may have acted on it. Were they
// unavailable, one message that the receiver cannot take would pause the
// relay every time it came up. When the endpoint answered none of the
// call's requests (neither a 2xx nor a refusal), the timeouts are
// unavailable, like a connection that cannot be made: a hung endpoint must
// not slowly park every message as DEAD. The relay then tells a hung
// endpoint from one message that hangs it: it publishes that message alone,
// after the others, and charges it a retry when the others go through.
//
// # Verifying signatures
//
// The signature follows Standard Webhooks (https://www.standardwebhooks.com),
// so their libraries verify it too. A receiver checks it over the raw body
// before parsing it; Verify refuses a request signed more than the
// tolerance (5 minutes by default) from now, which stops a replay, and one
// whose timestamp was changed:
//
//	body, _ := io.ReadAll(r.Body)
//	if err := webhook.Verify([]string{secret}, r.Header, body, 0); err != nil {
//		http.Error(w, err.Error(), http.StatusUnauthorized)
//		return
//	}
//
// or wraps its handler in Verifier. During a rotation of secrets the
// publisher signs with both and the receiver accepts either. Receivers of
// earlier releases keep X-Outbox-Signature-256 with Config.LegacySignature
// and check it with VerifyLegacy.
package webhook
