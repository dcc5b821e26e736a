// Package outboxdriver is the contract between the outbox and a database
// driver: the interfaces a driver implements, every optional capability as
// an interface of its own, and the data types both sides share. The drivers
// of this repository (outboxpgx, outboxmysql, outboxsqlite) implement it and
// pass the shared suite in package drivertest.
//
// This package is for driver authors. It is not stable: names and methods
// may change in minor releases. Applications use package outbox, which
// names the shared types (outbox.Message, outbox.Tables...) as aliases of
// the ones here, and pass a driver to its constructors.
package outboxdriver
