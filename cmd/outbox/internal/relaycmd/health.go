package relaycmd

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/brokers"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// The health endpoints, served on the servers of --metrics-addr and
// --admin-addr without the admin token.
const (
	// LivenessPath answers 200 while the process runs.
	LivenessPath = "/healthz"
	// ReadinessPath answers 200 when the relay can do its work, else 503
	// with the reason.
	ReadinessPath = "/readyz"
)

const (
	// readyCheckTimeout bounds the database query of one readiness check.
	readyCheckTimeout = 2 * time.Second
	// readyCacheFor is how long a readiness answer is reused, so that
	// frequent probes cost the database one query at most this often.
	readyCacheFor = 500 * time.Millisecond
	// Backoff between attempts to reach a broker at start-up.
	brokerRetryMin = 500 * time.Millisecond
	brokerRetryMax = 15 * time.Second
	// brokerLogEvery is the least time between two log lines about a
	// broker that cannot be reached at start-up.
	brokerLogEvery = 10 * time.Second
)

// readiness is what /readyz reports: during start-up the step the relay is
// at, then the database, the schema version and every relay's Status.
type readiness struct {
	mu       sync.Mutex
	starting string // why the relay is not running yet; "" once it runs
	store    outboxdriver.Store
	relays   []*outbox.Relay
	checked  time.Time
	reason   string // of the last check, reused until readyCacheFor has passed
}

func newReadiness() *readiness { return &readiness{starting: "starting"} }

// setStarting records the start-up step the relay is waiting on.
func (r *readiness) setStarting(step string) {
	r.mu.Lock()
	r.starting = step
	r.checked = time.Time{}
	r.mu.Unlock()
}

// running records that the relays run on store.
func (r *readiness) running(store outboxdriver.Store, relays []*outbox.Relay) {
	r.mu.Lock()
	r.starting, r.store, r.relays, r.checked = "", store, relays, time.Time{}
	r.mu.Unlock()
}

// notReady returns why the relay is not ready, or "" when it is.
func (r *readiness) notReady(ctx context.Context) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.starting != "" {
		return r.starting
	}
	if time.Since(r.checked) < readyCacheFor {
		return r.reason
	}
	r.reason = r.check(ctx)
	r.checked = time.Now()
	return r.reason
}

func (r *readiness) check(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, readyCheckTimeout)
	defer cancel()
	v, err := r.store.SchemaVersion(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Sprintf("the database did not answer within %s", readyCheckTimeout)
	case err != nil:
		return "the database fails: " + maskedError(err)
	}
	if latest, ok := dbopen.LatestVersion(r.store); ok && v < latest {
		return fmt.Sprintf("the outbox tables are at schema version %d and this relay needs version %d; run 'outbox migrate'", v, latest)
	}
	for i, rl := range r.relays {
		st := rl.Status()
		if st.Ready() {
			continue
		}
		who := ""
		if len(r.relays) > 1 {
			who = fmt.Sprintf("relay %d of %d: ", i+1, len(r.relays))
		}
		if st.Outage {
			return fmt.Sprintf("%sbroker outage since %s: %s", who, st.OutageSince.UTC().Format(time.RFC3339), maskedError(st.OutageError))
		}
		return fmt.Sprintf("%sthe database fails since %s: %s", who, st.DatabaseErrorSince.UTC().Format(time.RFC3339), maskedError(st.DatabaseError))
	}
	return ""
}

// maskedError is err on one line with its secrets masked.
func maskedError(err error) string {
	if err == nil {
		return "unknown error"
	}
	return cli.Scrub(cli.OneLine(err.Error()))
}

// register serves LivenessPath and ReadinessPath on mux.
func (r *readiness) register(mux *http.ServeMux) {
	mux.HandleFunc(LivenessPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc(ReadinessPath, func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if why := r.notReady(req.Context()); why != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", why)
			return
		}
		fmt.Fprintln(w, "ready")
	})
}

// openPublisherWaiting is brokers.Open that waits for a broker it cannot
// reach: it tries again with a growing pause (500ms doubling up to 15s,
// with jitter) until the broker answers or ctx ends, and /readyz says
// "connecting to the broker" meanwhile. Any other error, such as a bad URL
// or refused credentials, is returned at once.
func openPublisherWaiting(ctx context.Context, log *slog.Logger, ready *readiness, brokerURL string, o brokers.PublisherOptions) (outbox.Publisher, func(), error) {
	pause := brokerRetryMin
	var logged time.Time
	for attempt := 1; ; attempt++ {
		pub, closeFn, err := brokers.Open(ctx, brokerURL, o)
		if err == nil {
			if attempt > 1 {
				log.Info("connected to the broker", "broker", cli.RedactDSN(brokerURL), "attempts", attempt)
			}
			return pub, closeFn, nil
		}
		if !outbox.IsUnavailable(err) || ctx.Err() != nil {
			return nil, nil, err
		}
		msg := maskedError(err)
		ready.setStarting("connecting to the broker: " + msg)
		if time.Since(logged) >= brokerLogEvery {
			logged = time.Now()
			log.Warn("cannot reach the broker; trying again", "broker", cli.RedactDSN(brokerURL), "attempt", attempt, "error", msg)
		}
		wait := pause/2 + rand.N(pause/2+1)
		pause = min(2*pause, brokerRetryMax)
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(wait):
		}
	}
}
