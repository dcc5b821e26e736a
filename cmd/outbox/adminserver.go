package main

import (
	"log/slog"
	"net/http"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/admin"
)

// adminInFlight is how many admin requests use the database at once; the
// relay's pool has that many connections more.
const adminInFlight = 2

// serveAdmin serves the admin handler (package admin) under /admin/ on s,
// for outbox relay --admin-addr.
func serveAdmin(s *httpServer, store outbox.Store, o *relayOptions, log *slog.Logger) error {
	h, err := admin.NewHandler(admin.Config{Store: store, Writable: o.adminWritable, Token: o.adminToken, Logger: log,
		MaxInFlight: adminInFlight})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", http.StripPrefix("/admin", h))
	s.start(mux, log, "serving the admin API", "/admin/stats")
	if o.adminWritable {
		log.Info("the admin API can retry and drop DEAD messages (--admin-writable)")
	}
	return nil
}
