// Package outboxdriver is the contract between the outbox and a database
// driver: the interfaces a driver implements, every optional capability as
// an interface of its own, and the data types both sides share.
//
// This package is for driver authors. It is not stable: names and methods
// may change in minor releases. Applications use package outbox, which
// names the shared types (outbox.Message, outbox.Tables, outbox.Stats...)
// as aliases of the ones here, and pass a driver to its constructors.
//
// A [Driver] is a [Store], which works on the driver's own connections,
// and the calls on the application's transactions, [Inserter] and
// [InboxStore]. Each caller takes the part it uses:
//
//   - outbox.NewWriter: an [Inserter].
//   - outbox.NewInbox: an [InboxStore].
//   - outbox.NewRelay: a [Claimer]; it also uses the optional
//     [ClaimOverlapper], [DueChecker], [Watcher] and [KeyOrderer], and
//     with RelayConfig.CDC needs [Streamer] and [IDClaimer].
//   - outbox.NewCleaner: a [Pruner].
//   - package admin: an [Admin], and [BacklogReader] for GET /backlog;
//     package console also needs [DeadSearcher] and [TopicBacklogReader].
//   - the outbox command: a [Store], and [SchemaChecker], [RescanMarker]
//     and [StreamLagger] where the driver has them.
//
// The drivers of this repository (outboxpgx, outboxmysql, outboxsqlite)
// implement all of it but RescanMarker and the stream, which only some
// have, and pass the shared suite in package drivertest, which a new
// driver should run too.
package outboxdriver
