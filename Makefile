# fencegate's build. `make help` lists the targets.

GO            ?= go
PKGS          ?= ./...
# The race detector is on by default; `make test RACE=` turns it off.
RACE          ?= -race
TESTFLAGS     ?=
TEST_TIMEOUT  ?= 15m
# Where `make test` checks gofmt.
GOFMT_PATHS   ?= .
# Arguments for `make run`, after `fencegate dev`.
ARGS          ?=

# The safety campaign (cmd/fencechaos, docs/SAFETY.md). `make test` ends with
# a short fenced and control run per backend (`make test CHAOS=` skips them);
# `make chaos` runs the long one. One seed per backend, printed; CHAOS_SEED=n
# replays a schedule. Each of CHAOS_BACKENDS is a backend, with :PROTOCOL
# for the workers' fencechaos --protocol (postgres:pgwire: pgx through
# fencegate's PostgreSQL listener; redis:resp: go-redis through its RESP
# listener; default grpc+http), with @SOURCE for --source, the election the
# workers campaign in, else etcd (postgres@zookeeper: workers elected in
# ZooKeeper, the fence routed to the zookeeper term source; redis@redis-lease:
# the seed's Redis lease, in the data's own Redis).
CHAOS               ?= short
CHAOS_BACKENDS      ?= postgres redis postgres:pgwire redis:resp postgres@zookeeper redis@redis-lease postgres@postgres-term
CHAOS_SEED          ?=
CHAOS_FLAGS         ?=
CHAOS_SHORT_FENCED  ?= 30s
CHAOS_SHORT_CONTROL ?= 30s
CHAOS_LONG_FENCED   ?= 30m
CHAOS_LONG_CONTROL  ?= 5m
# The short runs lead more terms recklessly, so a 30s control run is all but
# sure to see a zombie write land (it must, or the run fails); and their
# leaders are hostile: one write in ten is preceded by an attack with the
# leader's own token, which fencegate must refuse (control runs send none).
# Every run's replicas serve TLS with client certificates and a policy
# (fencechaos --secure, on by default; docs/SAFETY.md).
CHAOS_SHORT_FLAGS   ?= --reckless=0.85 --hostile=0.1

# Stamped into every build: `fencegate version` and its start-up log line.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.Version=$(VERSION) -X main.Commit=$(COMMIT)

# `make install`: the binary into $(PREFIX)/bin, the systemd unit into
# $(PREFIX)/lib/systemd/system, a sample environment file into
# $(SYSCONFDIR)/fencegate; all under $(DESTDIR) when set (packaging).
PREFIX      ?= /usr/local
SYSCONFDIR  ?= /etc
DESTDIR     ?=

# grpcurl, for the README's gRPC walkthrough and its test: built from the Go
# module proxy into bin/tools by `make deps`, as golangci-lint is below.
GRPCURL_VERSION ?= v1.9.4
GRPCURL         := bin/tools/grpcurl-$(GRPCURL_VERSION)

# kustomize renders deploy/kubernetes for deploy's tests (a kubectl from
# Debian 12 is too old for it): built the same way by `make deps`.
KUSTOMIZE_VERSION ?= v5.5.0
KUSTOMIZE         := bin/tools/kustomize-$(KUSTOMIZE_VERSION)

# golangci-lint is pinned here, not in go.mod, to keep go.mod lean. It is
# built from the Go module proxy once per version into bin/tools.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT         := bin/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The Node example's npm packages (etcd3), and the Node clients the
# listeners' tests drive (node-postgres, postgres.js, ioredis, node-redis), installed
# from their lock files by `make deps`; npm ci writes the stamp file last.
EXAMPLES_NODE_MODULES := examples/node/node_modules/.package-lock.json
TEST_NODE_MODULES := api/testdata/node/node_modules/.package-lock.json

.PHONY: deps
deps: $(GRPCURL) $(KUSTOMIZE) ## Install missing system packages (protoc, redis, etcd, postgres, pgbouncer, nutcracker, python3-redis, ruby-redis, psycopg2, psycopg, asyncpg, SQLAlchemy, Django, ActiveRecord, PgJDBC, HikariCP, PHP (PDO, phpredis), prometheus and promtool, curl, jq, python3-etcd3, node) via apt-get as root; build grpcurl and kustomize into bin/tools; npm ci the Node example and the tests' Node clients; download the Go clients of api/testdata/go.
	@.ci/deps.sh
	@[[ $(EXAMPLES_NODE_MODULES) -nt examples/node/package-lock.json ]] || \
		{ echo "deps: npm ci --prefix examples/node"; npm ci --prefix examples/node --no-audit --no-fund --loglevel=error; }
	@[[ $(TEST_NODE_MODULES) -nt api/testdata/node/package-lock.json ]] || \
		{ echo "deps: npm ci --prefix api/testdata/node"; npm ci --prefix api/testdata/node --no-audit --no-fund --loglevel=error; }
	@$(GO) -C api/testdata/go mod download || { echo "deps: cannot download the Go modules of api/testdata/go (lib/pq, GORM, redigo, rueidis) from the module proxy"; exit 1; }

.PHONY: test-examples
test-examples: deps ## Run only the worker examples (examples/: shell, Python, Node) against fencegate dev; make test runs them too.
	$(GO) test $(RACE) -count=1 -timeout $(TEST_TIMEOUT) ./examples/

$(GRPCURL):
	@mkdir -p $(@D)
	@echo "deps: building grpcurl $(GRPCURL_VERSION) into $(@D)"
	GOBIN=$(CURDIR)/$(@D) $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	mv $(@D)/grpcurl $@
	ln -sf $(@F) $(@D)/grpcurl

$(KUSTOMIZE):
	@mkdir -p $(@D)
	@echo "deps: building kustomize $(KUSTOMIZE_VERSION) into $(@D)"
	GOBIN=$(CURDIR)/$(@D) $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	mv $(@D)/kustomize $@
	ln -sf $(@F) $(@D)/kustomize

.PHONY: build
build: ## Build the binaries into bin/, stamped with VERSION and COMMIT.
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

# The container image's binary (deploy/container/Dockerfile runs this
# target): fencegate alone, with the same LDFLAGS as build, linked
# statically. Not CGO_ENABLED=0: the SQL checks use PostgreSQL's own parser
# (pg_query, in C); netgo and osusergo keep the C library's resolver and
# user lookup, which cannot be linked statically, out of it.
STATIC_OUT  ?= bin/static
STATIC_TAGS := netgo,osusergo

.PHONY: build-static
build-static: ## Build $(STATIC_OUT)/fencegate statically linked, as the container image does.
	CGO_ENABLED=1 $(GO) build -trimpath -tags '$(STATIC_TAGS)' -ldflags '$(LDFLAGS) -linkmode=external -extldflags=-static' -o $(STATIC_OUT)/fencegate ./cmd/fencegate

# `make image` needs a container engine (docker, or DOCKER=podman).
DOCKER ?= docker
IMAGE  ?= fencegate:$(VERSION)

.PHONY: image
image: ## Build the container image $(IMAGE) from deploy/container/Dockerfile (needs docker or podman).
	$(DOCKER) build -f deploy/container/Dockerfile --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .

.PHONY: test
test: deps ## go vet, gofmt check, alert rule tests, go test -race (./deploy included: image build stage, manifests, live Prometheus), then the short chaos runs (PKGS=./tokens/ to narrow, RACE= to drop -race).
	$(GO) vet $(PKGS)
	$(GO) -C api/testdata/go vet ./...
	@unformatted=$$({ find $(GOFMT_PATHS) -name '*.go' -not -path '*/.git/*' -not -path '*/testdata/*' -print0; find api/testdata/go -name '*.go' -print0; } | xargs -0 -r gofmt -l); \
	if [[ -n "$$unformatted" ]]; then echo "gofmt: these files need formatting:"; echo "$$unformatted"; exit 1; fi
	@$(MAKE) --no-print-directory test-alerts
	FENCEGATE_KUSTOMIZE=$(CURDIR)/$(KUSTOMIZE) $(GO) test $(RACE) -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)
ifneq ($(CHAOS),)
	@$(MAKE) --no-print-directory build
	$(call chaos-run,$(CHAOS_SHORT_FENCED),$(CHAOS_SHORT_CONTROL),$(CHAOS_SHORT_FLAGS))
endif
	@echo "make test: passed: go vet, gofmt, promtool rule tests, go test$(if $(CHAOS), and the chaos runs above)"

.PHONY: test-alerts
test-alerts: ## Check deploy/prometheus's alert rules and run their unit tests (promtool); every alert must have one.
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml
	@for a in $$(sed -n 's/^ *- alert: *//p' deploy/prometheus/alerts.yml); do \
		grep -q "alertname: $$a\$$" deploy/prometheus/alerts_test.yml || { echo "test-alerts: no test of alert $$a in alerts_test.yml"; exit 1; }; \
	done

# chaos-run runs .ci/chaos.sh: per backend, a fenced run of $(1) then a
# control run of $(2) on the same seed, with extra flags $(3). A fenced run
# with violations, or a control run without any, fails.
define chaos-run
	@CHAOS_BACKENDS='$(CHAOS_BACKENDS)' CHAOS_SEED='$(CHAOS_SEED)' .ci/chaos.sh $(1) $(2) $(3) $(CHAOS_FLAGS)
endef

.PHONY: chaos
chaos: deps build ## The long safety campaign: per backend (and postgres:pgwire, redis:resp), fenced 30m then control 5m (docs/SAFETY.md; CHAOS_BACKENDS=redis to narrow).
	$(call chaos-run,$(CHAOS_LONG_FENCED),$(CHAOS_LONG_CONTROL))

.PHONY: run
run: deps build ## Run fencegate with its embedded defaults (fencegate dev; ARGS='--postgres-port=5433' passes flags).
	bin/fencegate dev $(ARGS)

.PHONY: install
install: build ## Install fencegate, its systemd unit and a sample env file (PREFIX=/usr/local, SYSCONFDIR=/etc, DESTDIR).
	install -D -m 0755 bin/fencegate $(DESTDIR)$(PREFIX)/bin/fencegate
	@mkdir -p $(DESTDIR)$(PREFIX)/lib/systemd/system
	sed -e 's|/usr/local/bin/fencegate|$(PREFIX)/bin/fencegate|' -e 's|/etc/fencegate/|$(SYSCONFDIR)/fencegate/|' \
		deploy/systemd/fencegate.service >$(DESTDIR)$(PREFIX)/lib/systemd/system/fencegate.service
	@if [[ -e $(DESTDIR)$(SYSCONFDIR)/fencegate/env ]]; then \
		echo "install: kept $(DESTDIR)$(SYSCONFDIR)/fencegate/env"; \
	else \
		echo "install -D -m 0600 deploy/systemd/fencegate.env $(DESTDIR)$(SYSCONFDIR)/fencegate/env"; \
		install -D -m 0600 deploy/systemd/fencegate.env $(DESTDIR)$(SYSCONFDIR)/fencegate/env; \
	fi

.PHONY: uninstall
uninstall: ## Remove what make install installed, except the env file.
	rm -f $(DESTDIR)$(PREFIX)/bin/fencegate $(DESTDIR)$(PREFIX)/lib/systemd/system/fencegate.service

.PHONY: bench
bench: deps ## Full benchmark (cmd/fencebench, about 15 min): table and JSON to stdout, report into docs/BENCHMARKS.md.
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/fencegate ./cmd/fencebench
	bin/fencebench --json --markdown docs/BENCHMARKS.md $(BENCHFLAGS)

.PHONY: bench-quick
bench-quick: deps ## Short benchmark (about 2 min): table and JSON to stdout (BENCHFLAGS= passes flags to fencebench).
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/fencegate ./cmd/fencebench
	bin/fencebench --quick --json $(BENCHFLAGS)

.PHONY: generate
generate: ## Regenerate api/gen from the proto and api/gateway.yaml (needs protoc: make deps).
	.ci/generate.sh api/gen

.PHONY: verify-generate
verify-generate: ## Fail if api/gen differs from a fresh 'make generate' (tree left untouched).
	.ci/verify-generate.sh

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (linters and gofumpt as in .golangci.yml).
	$(GOLANGCI_LINT) run $(PKGS)

$(GOLANGCI_LINT):
	@mkdir -p $(@D)
	GOBIN=$(CURDIR)/$(@D) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(@D)/golangci-lint $@

.PHONY: clean
clean: ## Remove build outputs (bin/, test binaries, coverage files).
	rm -rf bin/
	rm -f *.test *.out coverage.*
