#!/usr/bin/env bash
# Persistent caches (issue 19): a second fresh sandbox against the host's
# second run, measured in one run, interleaved (bench/interleave.py: one run
# of each command per round, so this machine's drift falls on both alike).
#
#   go:  sh -c 'go build ./... && go test ./...' on a module with
#        dependencies from the Go module proxy the host's go uses
#   npm: npm ci of a project with dependencies from the host's npm registry
#
# The host side has caches of its own in the benchmark's directory (not the
# machine's ~/.cache/go-build, ~/go/pkg/mod or ~/.npm); the sandbox side is
# `hutch run` with its default policy: the built-in caches, and the egress
# proxy letting through the registries the host's tools are configured to
# use (discovered, nothing named here). Each side's first run fills its
# caches (reported, not judged); the judged ratio is of the medians of the
# second and later runs.
#
#   bash bench/caches.sh        # uses $HUTCH_BIN or bin/hutch; results in bench/results/caches*.{json,txt}
#
# Knobs: BENCH_CACHE_RUNS (interleaved rounds, default 15), BENCH_INSTALL=0
# (never apt-get). As root, every measured command runs as nobody (65534),
# as bench/run.sh does.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/bench/results
RUNS=${BENCH_CACHE_RUNS:-15}
SRC_BIN=${HUTCH_BIN:-$ROOT/bin/hutch}
say() { printf 'bench-caches: %s\n' "$*" >&2; }
[ -x "$SRC_BIN" ] || { say "building $SRC_BIN"; make -C "$ROOT" build >&2; }
command -v go >/dev/null || { say "go is required"; exit 1; }
command -v npm >/dev/null || { say "npm is required (make deps-test installs it)"; exit 1; }
GO=$(command -v go)
mkdir -p "$OUT"
rm -f "$OUT"/caches*.json "$OUT"/caches.txt

WORK=$(mktemp -d /tmp/hutch-bench-caches.XXXXXX)
chmod 755 "$WORK"
SHM=/dev/shm/hutch-bench-caches.$$
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK" "$SHM"' EXIT
BIN=$WORK/bin/hutch
UHOME=$WORK/home
mkdir -p "$WORK/bin" "$UHOME/cache" "$UHOME/state" "$UHOME/run" "$UHOME/host" "$WORK/go-host" "$WORK/go-hutch" "$WORK/npm-host" "$WORK/npm-hutch" "$WORK/out"
chmod 700 "$UHOME/run"
cp "$SRC_BIN" "$BIN"
chmod 755 "$WORK/bin" "$BIN"
cp "$ROOT/bench/interleave.py" "$WORK/interleave.py"

# --- the projects ---------------------------------------------------------------
# A module with dependencies (a CLI library and its flags package, the
# x/ repositories' text and sync, a UUID package): two packages, so that
# go build ./... builds and discards, writing nothing in the workspace.
G=$WORK/go-host
cat >"$G/go.mod" <<'EOF'
module example.test/benchapp

go 1.21

require (
	github.com/google/uuid v1.6.0
	github.com/spf13/cobra v1.8.1
	golang.org/x/sync v0.10.0
	golang.org/x/text v0.21.0
)
EOF
mkdir -p "$G/cmd/benchapp" "$G/greet"
cat >"$G/greet/greet.go" <<'EOF'
// Package greet greets, in any language's case rules.
package greet

import (
	"context"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// Hello greets each name concurrently, with a request id.
func Hello(ctx context.Context, names ...string) ([]string, error) {
	out := make([]string, len(names))
	g, _ := errgroup.WithContext(ctx)
	title := cases.Title(language.English)
	for i, n := range names {
		g.Go(func() error {
			out[i] = "hello, " + title.String(n) + " (" + uuid.NewString()[:8] + ")"
			return nil
		})
	}
	return out, g.Wait()
}
EOF
cat >"$G/greet/greet_test.go" <<'EOF'
package greet

import (
	"context"
	"strings"
	"testing"
)

func TestHello(t *testing.T) {
	got, err := Hello(context.Background(), "ada", "grace")
	if err != nil || len(got) != 2 || !strings.HasPrefix(got[1], "hello, Grace (") {
		t.Fatalf("%q, %v", got, err)
	}
}
EOF
cat >"$G/cmd/benchapp/main.go" <<'EOF'
package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"example.test/benchapp/greet"
)

func main() {
	cmd := &cobra.Command{Use: "benchapp", RunE: func(c *cobra.Command, args []string) error {
		lines, err := greet.Hello(context.Background(), args...)
		for _, l := range lines {
			fmt.Println(l)
		}
		return err
	}}
	_ = cmd.Execute()
}
EOF
N=$WORK/npm-host
cat >"$N/package.json" <<'EOF'
{"name": "benchapp", "version": "1.0.0", "private": true,
 "dependencies": {"express": "4.21.2", "lodash": "4.17.21", "commander": "12.1.0", "semver": "7.6.3"}}
EOF

RUNAS=()
BUSER=$(id -un)
if [ "$(id -u)" = 0 ]; then
	chown -R 65534:65534 "$UHOME" "$WORK/go-host" "$WORK/go-hutch" "$WORK/npm-host" "$WORK/npm-hutch" "$WORK/out"
	RUNAS=(setpriv --reuid 65534 --regid 65534 --clear-groups)
	BUSER="nobody (uid 65534)"
fi
UENV=(env -i PATH="$(dirname "$GO"):/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 HOME="$UHOME"
	XDG_CACHE_HOME="$UHOME/cache" XDG_STATE_HOME="$UHOME/state" XDG_RUNTIME_DIR="$UHOME/run"
	npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false)
as_user() { (cd "$WORK" && exec "${RUNAS[@]}" "${UENV[@]}" "$@"); }
# The host's caches, the benchmark's own.
HGO=(env GOCACHE="$UHOME/host/go-build" GOMODCACHE="$UHOME/host/go-mod")
HNPM=(env npm_config_cache="$UHOME/host/npm")

say "preparing the projects (go mod tidy, npm's lock file) on the host"
as_user "${HGO[@]}" sh -c "cd '$G' && go mod tidy" >&2
as_user "${HNPM[@]}" sh -c "cd '$N' && npm install --package-lock-only --no-audit --no-fund" >&2
as_user cp -r "$G/." "$WORK/go-hutch/"
as_user cp -r "$N/." "$WORK/npm-hutch/"

GOCMD="go build ./... && go test ./..."
NPMCMD="npm ci --no-audit --no-fund"
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel: $(uname -r), cpus: $(nproc), user: $BUSER"
	echo "hutch: $("$BIN" --version 2>&1 | head -1)"
	echo "go: $(go version), npm: $(as_user npm --version), node: $(node --version)"
	echo "rounds: $RUNS"
	echo "loadavg-start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/caches-env.txt"
cat "$OUT/caches-env.txt" >&2

# cold NAME CMD...: the first run, timed once (it fills the caches).
cold() {
	local name=$1 s e
	shift
	s=$(date +%s%N)
	as_user "$@" >"$WORK/out/$name.log" 2>&1 || { say "$name failed:"; cat "$WORK/out/$name.log" >&2; exit 1; }
	e=$(date +%s%N)
	printf '%s %d\n' "$name" $(((e - s) / 1000000)) >>"$OUT/caches-cold.txt"
	say "$name (first run): $(((e - s) / 1000000)) ms"
}
rm -f "$OUT/caches-cold.txt"
cold go-host "${HGO[@]}" sh -c "cd '$G' && $GOCMD"
cold go-hutch "$BIN" run -w "$WORK/go-hutch" -- sh -c "$GOCMD"
cold npm-host "${HNPM[@]}" sh -c "cd '$N' && $NPMCMD"
cold npm-hutch "$BIN" run -w "$WORK/npm-hutch" -- sh -c "$NPMCMD"

q() { local out="" w; for w in "$@"; do out+="$(printf '%q' "$w") "; done; printf '%s' "${out% }"; }
say "interleaved, $RUNS rounds: go"
# go-host-tmpfs: the host with go's work directory on a tmpfs, as it is in
# the sandbox (its /tmp), where this machine's /tmp is a disk: go links
# the main package there on every build.
as_user mkdir -p "$SHM"
as_user python3 "$WORK/interleave.py" "$RUNS" 1 "$WORK/out/caches-go.json" \
	go-host "$(q "${HGO[@]}" sh -c "cd '$G' && $GOCMD")" \
	go-hutch "$(q "$BIN" run -w "$WORK/go-hutch" -- sh -c "$GOCMD")" \
	go-host-tmpfs "$(q "${HGO[@]}" GOTMPDIR="$SHM" sh -c "cd '$G' && $GOCMD")"
cp "$WORK/out/caches-go.json" "$OUT/caches-go.json"
say "interleaved, $RUNS rounds: npm"
as_user python3 "$WORK/interleave.py" "$RUNS" 1 "$WORK/out/caches-npm.json" \
	npm-host "$(q "${HNPM[@]}" sh -c "cd '$N' && $NPMCMD")" \
	npm-hutch "$(q "$BIN" run -w "$WORK/npm-hutch" -- sh -c "$NPMCMD")"
cp "$WORK/out/caches-npm.json" "$OUT/caches-npm.json"
# What a cold sandbox (--no-cache) costs against them, a few rounds
# (BENCH_CACHE_NOCACHE, default 2; 0 leaves it out).
NOCACHE=${BENCH_CACHE_NOCACHE:-2}
if [ "$NOCACHE" != 0 ]; then
	say "interleaved, $NOCACHE rounds: the same with --no-cache"
	as_user python3 "$WORK/interleave.py" "$NOCACHE" 0 "$WORK/out/caches-nocache.json" \
		go-hutch-no-cache "$(q "$BIN" run --no-cache -w "$WORK/go-hutch" -- sh -c "$GOCMD")" \
		npm-hutch-no-cache "$(q "$BIN" run --no-cache -w "$WORK/npm-hutch" -- sh -c "$NPMCMD")"
	cp "$WORK/out/caches-nocache.json" "$OUT/caches-nocache.json"
fi
as_user "$BIN" cache ls >"$OUT/caches-ls.txt" 2>&1 || true
echo "loadavg-end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/caches-env.txt"

python3 - "$OUT" <<'EOF' | tee "$OUT/caches.txt"
import json, sys
out = sys.argv[1]
def med(f):
    return {r["command"]: r for r in json.load(open(f"{out}/{f}"))["results"]}
import os
go, npm = med("caches-go.json"), med("caches-npm.json")
nc = med("caches-nocache.json") if os.path.exists(f"{out}/caches-nocache.json") else None
cold = dict(l.split() for l in open(f"{out}/caches-cold.txt"))
rows = [("go build ./... && go test ./..., second fresh hutch run vs the host's second run", go["go-hutch"], go["go-host"], 1.15),
        ("npm ci, second fresh hutch run vs the host's second run", npm["npm-hutch"], npm["npm-host"], 1.20)]
print(open(f"{out}/caches-env.txt").read().rstrip())
print()
for what, h, base, target in rows:
    r = h["median"] / base["median"]
    verdict = "PASS" if r <= target else "FAIL"
    print(f"{what}: {r:.3f}x (hutch {h['median']*1000:.0f} ms, host {base['median']*1000:.0f} ms; "
          f"min {h['min']*1000:.0f} / {base['min']*1000:.0f} ms) target <= {target}x {verdict}")
t = go["go-host-tmpfs"]
print(f"the same against the host with go's work directory on a tmpfs (GOTMPDIR; the sandbox's /tmp is one): "
      f"{go['go-hutch']['median'] / t['median']:.3f}x (host-tmpfs {t['median']*1000:.0f} ms, min {t['min']*1000:.0f} ms) info")
print(f"first runs (filling the caches): go host {cold['go-host']} ms, hutch {cold['go-hutch']} ms; "
      f"npm host {cold['npm-host']} ms, hutch {cold['npm-hutch']} ms")
if nc:
    print(f"hutch --no-cache (every run cold): go {nc['go-hutch-no-cache']['median']*1000:.0f} ms, "
          f"npm {nc['npm-hutch-no-cache']['median']*1000:.0f} ms (median of {len(nc['go-hutch-no-cache']['times'])}) info")
EOF
