#!/usr/bin/env bash
# Review mode's cost (docs/REVIEW.md, docs/PERFORMANCE.md "Review mode"):
#
#  1. a write-heavy workload — untar 15,000 files, then build (make over
#     them: 150 targets, each concatenating and compressing 100 files) —
#     on the host, in `hutch run` (direct) and in `hutch run --review`,
#     alternated by one hyperfine invocation; the ratio review/direct is the
#     target (<= 1.1);
#  2. `hutch diff` of a change set of 15,000 changed files: --stat, --json
#     and the full text with unified diffs, for 15,000 added files and for
#     15,000 modified ones (target: < 1 s).
#
#   bash bench/review.sh          # uses $HUTCH_BIN or bin/hutch
#
# As root every hutch command runs as uid 65534 (nobody), like run.sh.
# Knobs: BENCH_REVIEW_RUNS (hyperfine runs, default 10), BENCH_FILES
# (default 15000). Results: bench/results/review-*.json and review.txt.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/bench/results
RUNS=${BENCH_REVIEW_RUNS:-10}
FILES=${BENCH_FILES:-15000}
SRC_BIN=${HUTCH_BIN:-$ROOT/bin/hutch}
mkdir -p "$OUT"
command -v hyperfine >/dev/null || { echo "bench: hyperfine is required: apt-get install hyperfine" >&2; exit 1; }

T=$(mktemp -d /tmp/hutch-bench-review-XXXXXX)
chmod 755 "$T"
trap 'rm -rf "$T"' EXIT
BIN=$T/hutch
cp "$SRC_BIN" "$BIN"
chmod 755 "$BIN"
WS=$T/ws
ST=$T/state
mkdir -p "$WS" "$ST"

# The source tree: FILES small text files in directories of 100, and a
# Makefile with one target per directory.
SRC=$T/src
mkdir -p "$SRC"
python3 - "$SRC" "$FILES" <<'PY'
import os, sys
src, n = sys.argv[1], int(sys.argv[2])
dirs = (n + 99) // 100
for i in range(n):
    d = os.path.join(src, "src", "d%03d" % (i // 100))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d.c" % i), "w") as f:
        f.write("/* file %d */\nint f%d(int x) { return x * %d + 1; }\n" % (i, i, i) * 8)
with open(os.path.join(src, "Makefile"), "w") as f:
    outs = " ".join("out/d%03d.gz" % d for d in range(dirs))
    f.write("all: %s\n\nout/%%.gz: src/%%\n\t@mkdir -p out\n\t@cat $</*.c | gzip -1 > $@\n" % outs)
PY
# In the workspace: the sandbox's /tmp is its own.
tar -C "$SRC" -cf "$WS/src.tar" .
rm -rf "$SRC"

RUNAS=()
if [ "$(id -u)" = 0 ]; then
	chown -R 65534:65534 "$WS" "$ST"
	RUNAS=(setpriv --reuid 65534 --regid 65534 --clear-groups)
fi
UENV=(env -i PATH=/usr/bin:/bin HOME=/nonexistent LANG=C.UTF-8 XDG_STATE_HOME=$ST XDG_CACHE_HOME=$ST/cache XDG_RUNTIME_DIR=$ST)
as_user() { (cd "$WS" && exec "${RUNAS[@]}" "${UENV[@]}" "$@"); }
q() { printf '%q ' "$@"; }

# The workload starts from an empty workspace each time: untar, build.
WORK="tar -xf src.tar && make -s -j2"
RESET="rm -rf $WS/src $WS/out $WS/Makefile $ST/hutch/changes"
as_user "$BIN" run --no-discover -- true >/dev/null 2>&1 # warm the caches
# Interleaved rounds (host, direct, review, each after the same reset):
# one hyperfine invocation times all runs of one command before the next,
# and this shared VM's speed drifts by more than the ratio sought.
python3 - "$RUNS" "$OUT/review-workload.json" "$RESET" \
	host "$(q "${RUNAS[@]}" "${UENV[@]}" sh -c "cd $WS && $WORK")" \
	direct "$(q "${RUNAS[@]}" "${UENV[@]}" sh -c "cd $WS && $BIN run --no-discover -- sh -c '$WORK'")" \
	review "$(q "${RUNAS[@]}" "${UENV[@]}" sh -c "cd $WS && $BIN run --review --no-discover -- sh -c '$WORK' 2>/dev/null")" <<'PY'
import json, resource, statistics, subprocess, sys, time
runs, out, reset = int(sys.argv[1]), sys.argv[2], sys.argv[3]
cmds = list(zip(sys.argv[4::2], sys.argv[5::2]))
times = {n: [] for n, _ in cmds}
cpu = {n: [] for n, _ in cmds}  # user+system of the whole tree (the sandbox's processes are reaped inside it)
def used():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
for i in range(runs + 1):  # the first round warms up
    for n, c in (cmds if i % 2 == 0 else cmds[::-1]):
        subprocess.run(reset, shell=True, check=True)
        subprocess.run("sync", shell=True)
        c0, t0 = used(), time.perf_counter()
        subprocess.run(c, shell=True, check=True, stdout=subprocess.DEVNULL)
        if i > 0:
            times[n].append(time.perf_counter() - t0)
            cpu[n].append(used() - c0)
    print("bench: round %d: %s" % (i, " ".join("%s %.2fs (cpu %.2fs)" % (n, times[n][-1], cpu[n][-1]) for n, _ in cmds if times[n])), file=sys.stderr)
json.dump({"results": [{"command": n, "median": statistics.median(times[n]), "times": times[n], "cpu": cpu[n]} for n, _ in cmds]}, open(out, "w"), indent=1)
PY

# A change set of FILES added files (the workload's), then, in a second
# workspace holding the files, one of FILES modified files.
eval "$RESET"
as_user "$BIN" run --review --no-discover -- sh -c "$WORK" 2>"$T/added.err"
ADDED=$(sed -n 's/.*kept in change set \([^ ]*\) .*/\1/p' "$T/added.err")
WS2=$T/ws2
mkdir -p "$WS2"
tar -C "$WS2" -xf "$WS/src.tar"
[ "$(id -u)" = 0 ] && chown -R 65534:65534 "$WS2"
(cd "$WS2" && "${RUNAS[@]}" "${UENV[@]}" "$BIN" run --review --no-discover -- sh -c 'find src -name "*.c" -exec sed -i "1s/^/\/\/ changed\n/" {} +' 2>"$T/mod.err")
MOD=$(sed -n 's/.*kept in change set \([^ ]*\) .*/\1/p' "$T/mod.err")
[ -n "$ADDED" ] && [ -n "$MOD" ] || { echo "bench: no change set: $(cat "$T/added.err" "$T/mod.err")" >&2; exit 1; }
for id in "$ADDED" "$MOD"; do
	as_user "$BIN" diff --stat "$id" | sed -n 1p
done
hyperfine -N --runs "$RUNS" --warmup 2 --export-json "$OUT/review-diff.json" \
	-n "diff --stat, $FILES added" "$(q "${RUNAS[@]}" "${UENV[@]}" "$BIN" diff --stat "$ADDED")" \
	-n "diff --json, $FILES added" "$(q "${RUNAS[@]}" "${UENV[@]}" "$BIN" diff --json "$ADDED")" \
	-n "diff (full), $FILES added" "$(q "${RUNAS[@]}" "${UENV[@]}" "$BIN" diff "$ADDED")" \
	-n "diff --stat, $FILES modified" "$(q "${RUNAS[@]}" "${UENV[@]}" "$BIN" diff --stat "$MOD")" \
	-n "diff (full), $FILES modified" "$(q "${RUNAS[@]}" "${UENV[@]}" "$BIN" diff "$MOD")"

python3 - "$OUT/review-workload.json" "$OUT/review-diff.json" <<'PY' | tee "$OUT/review.txt"
import json, sys
w = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
med = lambda r: sorted(r["times"])[len(r["times"]) // 2]
h, d, v = med(w["host"]), med(w["direct"]), med(w["review"])
n = len(w["host"]["times"])
print("workload (untar + make), %d interleaved rounds:" % n)
print("  wall, medians: host %.2f s, direct %.2f s, review %.2f s" % (h, d, v))
print("  wall: review/direct %.3f (target <= 1.1)  direct/host %.3f  review/host %.3f" % (v / d, d / h, v / h))
pr = sorted(a / b for a, b in zip(w["review"]["times"], w["direct"]["times"]))
print("  wall, review/direct round by round: median %.3f (range %.2f-%.2f)" % (pr[len(pr) // 2], pr[0], pr[-1]))
if "cpu" in w["host"]:
    ch, cd, cv = (sorted(w[k]["cpu"])[n // 2] for k in ("host", "direct", "review"))
    print("  cpu (user+system of the whole tree), medians: host %.2f s, direct %.2f s, review %.2f s" % (ch, cd, cv))
    print("  cpu: review/direct %.3f  direct/host %.3f" % (cv / cd, cd / ch))
print("hutch diff:")
for r in json.load(open(sys.argv[2]))["results"]:
    print("  %-32s median %.3f s (target < 1 s)" % (r["command"], med(r)))
PY
