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
# replays a schedule.
CHAOS               ?= short
CHAOS_BACKENDS      ?= postgres redis
CHAOS_SEED          ?=
CHAOS_FLAGS         ?=
CHAOS_SHORT_FENCED  ?= 60s
CHAOS_SHORT_CONTROL ?= 45s
CHAOS_LONG_FENCED   ?= 30m
CHAOS_LONG_CONTROL  ?= 5m
# The short runs lead more terms recklessly, so a 45s control run is all but
# sure to see a zombie write land (it must, or the run fails); and their
# leaders are hostile: one write in ten is preceded by an attack with the
# leader's own token, which fencegate must refuse (control runs send none).
CHAOS_SHORT_FLAGS   ?= --reckless=0.85 --hostile=0.1

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

.PHONY: deps
deps: ## Install missing system packages (protoc, redis, etcdctl, postgres) via apt-get as root.
	@.ci/deps.sh

.PHONY: build
build: ## Build the binaries into bin/.
	$(GO) build -o bin/ ./cmd/...

.PHONY: test
test: deps ## go vet, gofmt check, then go test -race (PKGS=./tokens/ to narrow, RACE= to drop -race).
	$(GO) vet $(PKGS)
	@unformatted=$$(find $(GOFMT_PATHS) -name '*.go' -not -path '*/.git/*' -not -path '*/testdata/*' -print0 | xargs -0 -r gofmt -l); \
	if [[ -n "$$unformatted" ]]; then echo "gofmt: these files need formatting:"; echo "$$unformatted"; exit 1; fi
	$(GO) test $(RACE) -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)
ifneq ($(CHAOS),)
	@$(MAKE) --no-print-directory build
	$(call chaos-run,$(CHAOS_SHORT_FENCED),$(CHAOS_SHORT_CONTROL),$(CHAOS_SHORT_FLAGS))
endif

# chaos-run runs, per backend, a fenced run of $(1) then a control run of
# $(2) on the same seed, with extra flags $(3). A fenced run with violations, or a control run
# without any, fails.
define chaos-run
	@for b in $(CHAOS_BACKENDS); do \
		seed=$(or $(CHAOS_SEED),$$(( $$(date +%s%N) / 1000 % 1000000000 + 1 ))); \
		bin/fencechaos --backend=$$b --mode=fenced --duration=$(1) --seed=$$seed $(3) $(CHAOS_FLAGS) || exit 1; \
		bin/fencechaos --backend=$$b --mode=control --duration=$(2) --seed=$$seed $(3) $(CHAOS_FLAGS) || exit 1; \
	done
endef

.PHONY: chaos
chaos: deps build ## The long safety campaign: per backend, fenced 30m then control 5m (docs/SAFETY.md; CHAOS_BACKENDS=redis to narrow).
	$(call chaos-run,$(CHAOS_LONG_FENCED),$(CHAOS_LONG_CONTROL))

.PHONY: run
run: deps build ## Run fencegate with its embedded defaults (fencegate dev).
	bin/fencegate dev $(ARGS)

.PHONY: bench
bench: deps ## Full benchmark (cmd/fencebench, under 15 min): table and JSON to stdout, report into docs/BENCHMARKS.md.
	$(GO) build -o bin/ ./cmd/fencegate ./cmd/fencebench
	bin/fencebench --json --markdown docs/BENCHMARKS.md $(BENCHFLAGS)

.PHONY: bench-quick
bench-quick: deps ## Short benchmark (under 2 min): table and JSON to stdout (BENCHFLAGS= passes flags to fencebench).
	$(GO) build -o bin/ ./cmd/fencegate ./cmd/fencebench
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
