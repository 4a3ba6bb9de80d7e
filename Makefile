# hutch build and test entry points. `make demo` and `make test` set up
# everything on a fresh Debian machine (installing build dependencies with
# apt-get when run as root; otherwise they print the command to run).

GO        ?= go
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
BIN       := bin/hutch
MCP_IMAGE := cmd/hutch/mcpimage/hutch-mcp.gz
export CGO_ENABLED := 1
export GOFLAGS    := -mod=mod
# A static binary: glibc and libseccomp linked in, no runtime dependencies.
BUILD_TAGS := netgo,osusergo,urfave_cli_no_docs
LDFLAGS    := -s -w -X main.version=$(VERSION) -linkmode external -extldflags "-static"
# Debian packages needed to build and test.
DEB_BUILD  := gcc libc6-dev libseccomp-dev pkg-config
DEB_TEST   := git make python3 curl bubblewrap hyperfine busybox-static nodejs strace gdb default-jdk-headless runc docker-registry mmdebstrap

.PHONY: all build deps deps-test demo test test-unit test-e2e test-vm test-mcp vet fmt clean bench bench-caches

all: build

deps:
	@sh scripts/deps.sh $(DEB_BUILD)

deps-test:
	@sh scripts/deps.sh $(DEB_BUILD) $(DEB_TEST)
	@command -v npm >/dev/null || sh scripts/deps.sh npm

# Two links: a hutch with the MCP server (the official SDK, ~50 packages that
# every process would initialise at start) is compressed into MCP_IMAGE, and
# the hutch that users run carries it (tag mcpimage) and executes it from
# memory for `hutch mcp` only (cmd/hutch/mcp_image.go). `go build ./cmd/hutch`
# alone makes a working hutch with the server linked in.
$(BIN): deps $(shell find . -name '*.go' -o -name '*.c' -o -name '*.h' -o -name '*.json' | grep -v '^./test/') go.mod
	@mkdir -p bin $(dir $(MCP_IMAGE))
	$(GO) build -trimpath -tags $(BUILD_TAGS) -ldflags '$(LDFLAGS)' -o bin/.hutch-mcp ./cmd/hutch
	gzip -9 -n -c bin/.hutch-mcp > $(MCP_IMAGE).tmp && mv $(MCP_IMAGE).tmp $(MCP_IMAGE) && rm bin/.hutch-mcp
	$(GO) build -trimpath -tags $(BUILD_TAGS),mcpimage -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/hutch

build: $(BIN)

# The main job on the built-in default policy: a command in a fresh sandbox
# with the current directory as /workspace.
demo: build
	./$(BIN) run -- /bin/sh -c 'echo "hello from $$(id -un) (uid $$(id -u)) in $$(pwd) on $$(hostname)"; \
	  grep -E "^(CapEff|CapBnd|NoNewPrivs|Seccomp):" /proc/self/status; \
	  ls /; touch /usr/x 2>&1 || true; cat /etc/shadow 2>&1 || true'

vet: build
	$(GO) vet ./...
	$(GO) vet -tags mcpimage ./cmd/hutch

fmt:
	@test -z "$$(gofmt -l . | grep -v '^test/vm/cache' )" || { gofmt -l .; echo "gofmt needed"; exit 1; }

test-unit: deps-test
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test)

test-e2e: build deps-test
	HUTCH_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -v ./test/... 2>&1 | tee /tmp/hutch-e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|SKIP|\s+\S+_test.go)' ; \
	  exit $${PIPESTATUS[0]}

# The whole suite: formatting, vet, unit tests, end-to-end tests against the
# real kernel (run as an unprivileged user when invoked as root), and in CI
# (or with HUTCH_VM=1) the qemu VM tier.
test: SHELL := /bin/bash
test: build deps-test fmt vet
	HUTCH_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 ./...
	$(MAKE) --no-print-directory test-mcp
	@if [ -n "$$CI" ] || [ -n "$$HUTCH_VM" ]; then $(MAKE) --no-print-directory test-vm; \
	 else echo "make test: the qemu VM tier (cgroup v2 host) runs in CI or with HUTCH_VM=1: make test-vm"; fi

# The VM tier: a real cgroup v2 host (Debian's 6.1 cloud kernel) under qemu
# TCG, hutch run as uid 1000 there; installs qemu as root. docs/TESTING.md.
test-vm: build
	HUTCH_BIN=$(CURDIR)/$(BIN) HUTCH_VM=1 $(GO) test -count=1 -v ./test/vm/

# A real MCP client (the official TypeScript SDK under node) drives hutch mcp.
test-mcp: build deps-test
	HUTCH_BIN=$(CURDIR)/$(BIN) bash test/mcp/run.sh

bench: build deps-test
	bash bench/run.sh

# Persistent caches: a second fresh sandbox's go build && go test and npm ci
# against the host's second run (docs/PERFORMANCE.md).
bench-caches: build deps-test
	bash bench/caches.sh

clean:
	rm -rf bin $(dir $(MCP_IMAGE))
