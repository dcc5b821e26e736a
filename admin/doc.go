// Package admin serves an outbox table's admin calls over HTTP, as JSON: what
// `outbox stats` and `outbox dead list|show|retry|drop` do on the command
// line, for a dashboard, a runbook's script or an operator without a shell on
// the database's network. It uses the standard library only.
//
// The routes, relative to where the handler is mounted:
//
//	GET  /stats                  counts per status, in total and per topic (Stats)
//	GET  /backlog                pending count, oldest pending age, DEAD count (Backlog):
//	                             read through indexes, cheap enough to poll
//	GET  /messages               a page of messages without payloads (MessageList), oldest first:
//	                             ?status=dead (default) | new | sent, &topic=T,
//	                             &after_id=N (the previous page's next_after_id), &limit=1..10000 (100)
//	GET  /messages/{msg_id}      one message of any status, with headers and payload (Message);
//	                             percent-encode a "/" in the msg_id as %2F
//	POST /dead/retry             move DEAD messages back to NEW with a fresh retry budget (Changed)
//	POST /dead/drop              delete DEAD messages (Changed)
//
// The two POST routes take a JSON body (Content-Type: application/json), a
// Selection: {"msg_ids": ["order-42:OrderPaid"]}, or {"all": true} with an
// optional "topic"; dropping with "all" needs "yes": true as well. They act
// on DEAD messages only, whatever the msg_ids name, and answer how many
// moved. A retry is recorded in the row's last_error, before the previous
// error, with the time and the caller's address.
//
// Every other answer is an Error, {"error": "..."}, with the status that
// fits: 400 for a request to fix, 401 without the token, 403 for a retry or
// a drop on a read-only handler, 404, 405, 415, 500 for a database error,
// 503 when Config.MaxInFlight requests held the database for all of
// Config.Timeout, 504 when Config.Timeout ran out at the database.
//
// # Safety
//
// The handler only reads unless Config.Writable is set. Set Config.Token, or
// put the handler behind your own authentication, before you let anyone but
// trusted callers reach it: with Writable, a caller can delete DEAD messages
// for good. `outbox relay --admin-addr` and `outbox console` serve this
// handler under /admin/ beside the web console (package console), behind the
// console's tokens, sessions or trusted proxy header (console.Protect); they
// refuse --admin-writable without a token or the proxy's header, and refuse
// to serve at all without one on an address that is not loopback unless
// --admin-insecure says so.
//
// The messages listed by GET /messages?status=new or sent are found by
// walking the table in id order; on a table of millions of SENT rows a list
// of NEW ones reads the SENT rows before them. GET /backlog and the DEAD list
// read through indexes.
package admin
