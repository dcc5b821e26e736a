package brokers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/webhook"
)

// PublisherOptions configures the publisher Open builds. Zero fields
// take the publisher's defaults.
type PublisherOptions struct {
	// Source is the CloudEvents source attribute. Empty: the broker URL's
	// source parameter, where the broker takes one, else "/outbox".
	Source string
	// WebhookSecrets, when set, sign each webhook request (Standard
	// Webhooks), one signature per secret.
	WebhookSecrets []string
	// LegacySignature also sends the signature of earlier releases in
	// X-Outbox-Signature-256.
	LegacySignature bool
	// WebhookTimeout bounds one webhook request. Defaults to 10s.
	WebhookTimeout time.Duration
	// Concurrency is the most requests in flight at once. Defaults to 16.
	Concurrency int
}

const supportedBrokers = "nats://, amqp(s)://, kafka://, redis(s)://, mqtt(s)://, http(s)://, discard:"

// Open returns the publisher for brokerURL and a function that
// releases it.
func Open(ctx context.Context, brokerURL string, o PublisherOptions) (pub outbox.Publisher, closeFn func(), err error) {
	scheme, _, ok := strings.Cut(brokerURL, ":")
	if !ok || scheme == "" {
		return nil, nil, fmt.Errorf("--broker %q is not a broker URL; supported: %s", cli.RedactDSN(brokerURL), supportedBrokers)
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "discard":
		return outbox.Discard, func() {}, nil
	case "http", "https":
		cli.AddURLSecret(brokerURL)
		for _, secret := range o.WebhookSecrets {
			cli.AddSecret(secret)
		}
		var first string
		var more []string
		if len(o.WebhookSecrets) > 0 {
			first, more = o.WebhookSecrets[0], o.WebhookSecrets[1:]
		}
		wp, err := webhook.New(webhook.Config{
			URL:             brokerURL,
			Source:          o.Source,
			Secret:          first,
			Secrets:         more,
			LegacySignature: o.LegacySignature,
			Timeout:         o.WebhookTimeout,
			Concurrency:     o.Concurrency,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%v; check --broker, --source, --webhook-secret, --webhook-secret-file, --webhook-timeout and --concurrency", err)
		}
		return wp, func() { _ = wp.Close() }, nil
	}
	b, ok := Adapters[scheme]
	if !ok {
		return nil, nil, fmt.Errorf("unknown broker scheme %q in --broker; supported: %s", scheme, supportedBrokers)
	}
	cli.AddURLSecret(brokerURL)
	p, err := b.Open(ctx, brokerURL, o.Source)
	if err != nil {
		msg := fmt.Sprintf("%s; check --broker / OUTBOX_BROKER", cli.Scrub(cli.OneLine(err.Error())))
		if outbox.IsUnavailable(err) {
			return nil, nil, unreachableError(msg)
		}
		return nil, nil, errors.New(msg)
	}
	return p, func() { _ = p.Close() }, nil
}

// unreachableError is a broker that could not be reached, with its message
// already scrubbed: it satisfies outbox.IsUnavailable.
type unreachableError string

func (e unreachableError) Error() string        { return string(e) }
func (e unreachableError) Is(target error) bool { return target == outbox.ErrUnavailable }
