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

.PHONY: run
run: deps build ## Run fencegate with its embedded defaults (fencegate dev).
	bin/fencegate dev $(ARGS)

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
