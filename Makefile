GO      ?= go
# Every target loops over the modules of the workspace (go.work).
MODULES := $(shell $(GO) list -m -f '{{.Dir}}')
PG      ?= postgres://postgres@127.0.0.1:5432/test
BENCH_MESSAGES ?= 100000
BENCH_RUNS     ?= 5
RELAYS         ?= 1
# FUZZTIME is a count, not a duration: Go 1.26's fuzz coordinator can fail a
# run at a duration's end, with no failing input (golang/go#75804).
FUZZTIME       ?= 200000x
CHAOS_DURATION ?= 3m
CHAOS_DB       ?= postgres
CHAOS_BROKER   ?= nats
CHAOS_OUTAGE   ?= 30s
CHAOS_DBDOWN   ?= 0
# The release binaries: version, commit and date stamped into "outbox version".
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE      ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
RELEASE_TAGS    := nodevbrokers
RELEASE_LDFLAGS := -s -w -X main.buildVersion=$(VERSION) -X main.buildCommit=$(COMMIT) -X main.buildDate=$(DATE)

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

.PHONY: test
test: vet ## vet and test every module with -race against the local PostgreSQL, MariaDB and SQLite, then modcheck
	@set -e; for m in $(MODULES); do echo "== go test $$m"; (cd $$m && $(GO) test -race -count=1 ./...); done
	@$(MAKE) --no-print-directory modcheck

.PHONY: vet
vet: ## go vet every module and check gofmt
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
	@cd e2e && $(GO) vet -tags chaos ./...
	@cd cmd/outbox && $(GO) vet -tags volume ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: lint
lint: ## golangci-lint every module (go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0)
	@command -v golangci-lint >/dev/null || { echo "golangci-lint not found; install it with: go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0"; exit 1; }
	@set -e; for m in $(MODULES); do (cd $$m && golangci-lint run --config $(CURDIR)/.golangci.yml ./...); done

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (200000 inputs)
	$(GO) test -run XXX -fuzz FuzzValidateMessage -fuzztime $(FUZZTIME) .
	@for d in webhook cloudevents admin; do for f in $$(cd $$d && $(GO) test -list 'Fuzz.*' . | grep ^Fuzz); do $(GO) test -run XXX -fuzz $$f -fuzztime $(FUZZTIME) ./$$d/; done; done

.PHONY: build
build: ## build bin/outbox
	cd cmd/outbox && $(GO) build -o ../../bin/outbox .

.PHONY: release
release: ## static binaries for PLATFORMS in dist/, without the demo's and bench's in-process brokers, and dist/SHA256SUMS
	@rm -rf dist && mkdir -p dist
	@set -e; for p in $(PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; echo "== dist/outbox-$$os-$$arch"; \
	  (cd cmd/outbox && CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -tags $(RELEASE_TAGS) -trimpath \
	    -ldflags "$(RELEASE_LDFLAGS)" -o $(CURDIR)/dist/outbox-$$os-$$arch .); done
	@cd dist && sha256sum outbox-* > SHA256SUMS && cat SHA256SUMS

.PHONY: deploy-check
deploy-check: ## check deploy/: the Kubernetes manifests' flags, variables and probes against the binary, the systemd unit
	cd cmd/outbox && $(GO) test -count=1 -run 'TestDeploy' -v . ./internal/relaycmd/

.PHONY: demo
demo: ## run the seed scenario end to end (embedded SQLite)
	$(GO) run ./cmd/outbox demo

.PHONY: bench
bench: build ## the issue's benchmark figures (PostgreSQL, SQLite, writer); takes a few minutes
	bin/outbox bench --db $(PG) --broker discard: --messages $(BENCH_MESSAGES) --batch 500 --runs $(BENCH_RUNS) --baseline
	bin/outbox bench --db $(PG) --broker discard: --messages $(BENCH_MESSAGES) --batch 500 --runs $(BENCH_RUNS) --relays 2 --scaling
	rm -f /tmp/outbox-bench.db*; bin/outbox bench --db sqlite:/tmp/outbox-bench.db --messages $(BENCH_MESSAGES) --batch 500 --runs $(BENCH_RUNS)
	bin/outbox bench --writer --db $(PG) --producers 8 --runs $(BENCH_RUNS)

.PHONY: bench-brokers
bench-brokers: build ## relay through each broker vs the broker's own acked rate and the relay with discard:, same run (RELAYS=1)
	@set -e; for b in 'nats://127.0.0.1:4222?stream=OUTBOX_BENCH&subject=bench.{topic}&max_age=10m' \
	  'redis://127.0.0.1:6379/0?stream=bench:{topic}&maxlen=100000' \
	  'amqp://guest:guest@127.0.0.1:5672/?exchange=outbox-bench' \
	  'mqtt://127.0.0.1:1883?topic=bench/{topic}' 'kfake:'; do \
	  echo "== $$b"; bin/outbox bench --db $(PG)?sslmode=disable --broker "$$b" --messages $(BENCH_MESSAGES) --batch 500 --runs $(BENCH_RUNS) --relays $(RELAYS); done

.PHONY: bench-poison
bench-poison: build ## the relay through a local webhook with and without one poison message (its POSTs drop the connection) among BENCH_MESSAGES: both rates and poison_ratio (target >= 0.9)
	bin/outbox bench --poison --db $(PG) --messages $(BENCH_MESSAGES) --runs $(BENCH_RUNS)

.PHONY: chaos
chaos: build ## CHAOS_DURATION (3m) of producers, relay processes, a private nats-server and a subscriber, killed at random, the broker down once for CHAOS_OUTAGE (30s) and the consumer's database once for CHAOS_DBDOWN (0: a third of the run, at most 1m); then every committed message must have exactly one effect, none be DEAD, and each key's first deliveries come in id order (CHAOS_DB=postgres|mysql|sqlite, CHAOS_BROKER=nats|amqp|redis|mqtt)
	cd e2e && OUTBOX_BIN=$(CURDIR)/bin/outbox $(GO) test -tags chaos -run TestChaos -count=1 -v -timeout 60m . -args -chaos.duration=$(CHAOS_DURATION) -chaos.db=$(CHAOS_DB) -chaos.broker=$(CHAOS_BROKER) -chaos.outage=$(CHAOS_OUTAGE) -chaos.dbdown=$(CHAOS_DBDOWN)

.PHONY: bench-writer
bench-writer: build ## the writer's ratios alone, 15 rounds of each shape (its per-round ratios swing widely on a shared host)
	bin/outbox bench --writer --db $(PG) --producers 8 --runs 15

.PHONY: bench-ageing
bench-ageing: build ## throughput after a million messages passed through the same table (11 runs of 100k)
	bin/outbox bench --db $(PG) --broker discard: --messages 100000 --batch 500 --runs 11

.PHONY: console-browser
console-browser: ## the console's browser tests alone: headless Chromium (/usr/bin/chromium) on a seeded PostgreSQL schema (npm ci in console/e2e first)
	cd cmd/outbox && $(GO) test -count=1 -run TestConsoleBrowser -v .

.PHONY: console-screenshots
console-screenshots: ## write docs/console*.png from the console's browser tests
	cd cmd/outbox && CONSOLE_SCREENSHOT=$(CURDIR)/docs/console.png $(GO) test -count=1 -run TestConsoleBrowser .

.PHONY: tidy
tidy: ## go mod tidy every module, the modules of this repository served from a local proxy (docs/modules.md)
	GO=$(GO) tools/modules.sh tidy $(DIRS)

.PHONY: bump-version
bump-version: ## require the repository's modules at VERSION everywhere (go.mod and go.work), then tidy, build and vet every module
	@case "$(origin VERSION)" in command*|environment*) ;; *) echo "usage: make bump-version VERSION=v0.2.0"; exit 1;; esac
	GO=$(GO) tools/modules.sh bump $(VERSION)

.PHONY: modcheck
modcheck: ## build and run a program outside the repository that fetches the core, outboxpgx and outboxnats from a local module proxy; go install cmd/outbox from it
	GO=$(GO) PG=$(PG)?sslmode=disable tools/modules.sh consumer
