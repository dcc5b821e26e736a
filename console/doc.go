// Package console serves the operator's web console of an outbox table: the
// backlog now and over the last hour, per topic; the DEAD messages, searched
// by msg_id, topic, key, error text and time, shown with payload, headers and
// error, and retried or dropped one at a time, as a selection, by filter or
// by failure group; and the failure groups themselves, the DEAD messages
// grouped by their error with msg_ids, topics, keys and numbers taken out.
// `outbox relay --admin-addr` and `outbox console` serve it; a program that
// runs the relay as a library mounts the Handler that New returns.
//
// The console's pages are plain HTML, CSS and JavaScript embedded in the
// binary: it needs no network beyond the handler.
//
// # Access
//
// Every call but the login needs an identity, from one of:
//
//   - a token (Config.Tokens): the browser sends it once to POST /api/login
//     and gets a session cookie (HttpOnly, SameSite=Strict); a script sends
//     it as "Authorization: Bearer <token>" on every call;
//   - a reverse proxy that authenticates (Config.AuthHeader): the header
//     names the user, and the handler trusts it, so only the proxy must
//     reach the handler;
//   - nobody (Config.Unauthenticated): for an address only trusted callers
//     reach.
//
// New refuses a Config with none of them. The console only reads unless
// Config.Writable is set. A retry or a drop sent with the session cookie or
// behind the proxy needs the session's CSRF token in the X-CSRF-Token header
// and an Origin header of the handler's own host; every retry and drop is
// logged with who asked and what it touched.
//
// # Bounds
//
// Every read goes through an index: the DEAD list walks the DEAD index a
// window at a time (outboxdriver.DeadSearcher), the backlog reads the NEW and DEAD
// rows per topic (outboxdriver.TopicBacklogReader). A page holds at most MaxPage
// messages, a count stops at MaxAction, a failure grouping reads at most
// MaxGroupScan DEAD rows, and a bulk action touches at most MaxAction rows,
// only those its confirmation counted: the ids and dead_at at or below the
// count's, so that a message that becomes DEAD meanwhile is left alone.
package console
