#!/usr/bin/env bash
# hutch image benchmarks (issue 20), each a ratio from ONE hyperfine run:
#   1. hutch run --image IMG -- true  against  hutch run -- true: the
#      image's root as overlays of its layers (the default here) and as its
#      flattened copy (HUTCH_IMAGE_ROOT=flattened; and the first run after
#      that copy was removed, which builds it again: the flatten time)
#   2. hutch image pull IMG (into an empty store)  against  crane pull of the
#      same image into an OCI layout, from the same loopback registry
#   3. hutch image pull of an image already stored: the registry's access log
#      must show no blob transferred
# The registry is Debian's docker-registry on 127.0.0.1, the image busybox
# plus the host's python3.11 and perl trees (three layers); crane v0.22.1
# (the library's own CLI) is installed into a temporary GOBIN.
# Results: bench/results/images-*.json and images-summary.txt.
#
#   bash bench/images.sh        # uses $HUTCH_BIN or bin/hutch
#
# As root, hutch and hyperfine run as uid/gid 65534 with their own HOME and
# XDG directories. Knobs: BENCH_RUNS (default 40), BENCH_PULL_RUNS (10),
# BENCH_IL_RUNS (interleaved rounds, 200).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/bench/results
RUNS=${BENCH_RUNS:-40}
PULL_RUNS=${BENCH_PULL_RUNS:-10}
IL_RUNS=${BENCH_IL_RUNS:-200}
SRC_BIN=${HUTCH_BIN:-$ROOT/bin/hutch}
say() { printf 'bench: %s\n' "$*" >&2; }
for c in hyperfine docker-registry python3 go; do
	command -v "$c" >/dev/null || { say "$c is required (apt-get install hyperfine docker-registry python3; Go for crane)"; exit 1; }
done
[ -x "$SRC_BIN" ] || make -C "$ROOT" build >&2
mkdir -p "$OUT"

WORK=$(mktemp -d /tmp/hutch-bench-images.XXXXXX)
chmod 755 "$WORK"
REG_PID=
cleanup() {
	# (Under set -e a failing last command of an && list would end the
	# trap here: wait returns the killed registry's status.)
	if [ -n "$REG_PID" ]; then
		kill "$REG_PID" 2>/dev/null || true
		wait "$REG_PID" 2>/dev/null || true
	fi
	if [ -z "${BENCH_KEEP:-}" ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

# The unprivileged user's world.
mkdir -p "$WORK/bin" "$WORK/ws" "$WORK/ws2" "$WORK/home" "$WORK/layout" "$WORK/res"
cp "$SRC_BIN" "$WORK/bin/hutch"
GOBIN=$WORK/gobin go install github.com/google/go-containerregistry/cmd/crane@v0.22.1
cp "$WORK/gobin/crane" "$WORK/bin/crane"
chmod 755 "$WORK/bin" "$WORK/bin/hutch" "$WORK/bin/crane"
ENVV=(HOME="$WORK/home" XDG_CACHE_HOME="$WORK/home/cache" XDG_STATE_HOME="$WORK/home/state"
	XDG_DATA_HOME="$WORK/home/data" XDG_RUNTIME_DIR="$WORK/home/run" PATH=/usr/bin:/bin)
AS=(env "${ENVV[@]}")
if [ "$(id -u)" = 0 ]; then
	chown -R 65534:65534 "$WORK/ws" "$WORK/ws2" "$WORK/home" "$WORK/layout" "$WORK/res"
	AS=(setpriv --reuid=65534 --regid=65534 --clear-groups env "${ENVV[@]}")
fi
HUTCH=$WORK/bin/hutch
STORE=$WORK/home/data/hutch/images

# The registry.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$WORK/registry.yml" <<EOF
version: 0.1
log: {level: info}
storage: {filesystem: {rootdirectory: $WORK/registry}}
http: {addr: 127.0.0.1:$PORT}
EOF
docker-registry serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/v2/" >/dev/null && break; sleep 0.05; done

# The image: busybox, python3.11, perl, one layer each.
mkdir -p "$WORK/bb/bin"
cp /bin/busybox "$WORK/bb/bin/"
for a in sh true cat ls; do ln -s busybox "$WORK/bb/bin/$a"; done
tar -C "$WORK/bb" -czf "$WORK/l1.tar.gz" .
tar -C / -czf "$WORK/l2.tar.gz" usr/lib/python3.11
tar -C / -czf "$WORK/l3.tar.gz" usr/share/perl
IMG=127.0.0.1:$PORT/bench/tools:v1
"$WORK/bin/crane" append -b "" -f "$WORK/l1.tar.gz" -f "$WORK/l2.tar.gz" -f "$WORK/l3.tar.gz" -t "$IMG" >/dev/null 2>&1 ||
	"$WORK/bin/crane" append -f "$WORK/l1.tar.gz" -f "$WORK/l2.tar.gz" -f "$WORK/l3.tar.gz" -t "$IMG" >/dev/null
SIZE=$(du -cb "$WORK"/l?.tar.gz | tail -1 | cut -f1)
say "image $IMG: $((SIZE / 1048576)) MiB compressed"

cd "$WORK/ws"
"${AS[@]}" "$HUTCH" image pull "$IMG" >/dev/null
"${AS[@]}" "$HUTCH" run -- true
"${AS[@]}" "$HUTCH" run --image "$IMG" -- true
(cd "$WORK/ws2" && "${AS[@]}" HUTCH_IMAGE_ROOT=flattened "$HUTCH" run --image "$IMG" -- true)

say "run --image vs run, interleaved ($IL_RUNS rounds)"
# Alternating rounds (bench/interleave.py): the ratio of two ~20 ms commands
# on a shared machine is steadier than from one hyperfine run of each. The
# flattened variant runs in a workspace of its own (ws2): a plan hint is
# kept per command line and directory, and its plan differs from the
# overlays' one, so sharing one would make each miss its hint every round.
"${AS[@]}" python3 "$ROOT/bench/interleave.py" "$IL_RUNS" 10 "$WORK/res/images-interleave.json" \
	host "$HUTCH run -- true" image "$HUTCH run --image $IMG -- true" \
	image-flat "env -C $WORK/ws2 HUTCH_IMAGE_ROOT=flattened $HUTCH run --image $IMG -- true"
say "run --image vs run, and the flattened copy after it was removed ($RUNS runs)"
# One --prepare per command (hyperfine pairs them in order): only the
# fourth removes the flattened root before each run.
"${AS[@]}" hyperfine -N --warmup 5 --runs "$RUNS" --export-json "$WORK/res/images-run.json" \
	--prepare true --prepare true --prepare true --prepare "sh -c 'rm -rf $STORE/roots/sha256/*'" \
	-n host "$HUTCH run -- true" \
	-n image "$HUTCH run --image $IMG -- true" \
	-n image-flat "env -C $WORK/ws2 HUTCH_IMAGE_ROOT=flattened $HUTCH run --image $IMG -- true" \
	-n image-reflatten "env -C $WORK/ws2 HUTCH_IMAGE_ROOT=flattened $HUTCH run --image $IMG -- true" >&2

say "pull vs crane pull ($PULL_RUNS runs)"
# Each hutch round removes what the store holds but its overlay probe's
# verdict, which a host keeps for its boot (a first pull after a boot
# also pays one probe, a process start).
"${AS[@]}" hyperfine --warmup 1 --runs "$PULL_RUNS" --export-json "$WORK/res/images-pull.json" \
	--prepare "rm -rf $WORK/layout/oci" --prepare "rm -rf $STORE/blobs $STORE/layers $STORE/roots $STORE/index.json" --prepare "rm -rf $STORE/blobs $STORE/layers $STORE/roots $STORE/index.json" \
	-n crane "$WORK/bin/crane pull --format=oci $IMG $WORK/layout/oci" \
	-n hutch "$HUTCH image pull $IMG" \
	-n hutch-no-unpack "$HUTCH image pull --no-unpack $IMG" >&2

say "pull --no-unpack vs crane pull, interleaved ($((PULL_RUNS * 3)) rounds; each removes its store first)"
"${AS[@]}" python3 "$ROOT/bench/interleave.py" "$((PULL_RUNS * 3))" 3 "$WORK/res/images-pull-interleave.json" \
	crane "sh -c 'rm -rf $WORK/layout/oci; exec $WORK/bin/crane pull --format=oci $IMG $WORK/layout/oci'" \
	hutch-no-unpack "sh -c 'rm -rf $STORE/blobs $STORE/layers $STORE/roots $STORE/index.json; exec $HUTCH image pull --no-unpack $IMG'"

"${AS[@]}" "$HUTCH" image pull "$IMG" >/dev/null
before=$(grep -c '"GET /v2/bench/tools/blobs/' "$WORK/registry.log" || true)
"${AS[@]}" "$HUTCH" image pull "$IMG" >"$WORK/repull.txt"
after=$(grep -c '"GET /v2/bench/tools/blobs/' "$WORK/registry.log" || true)

# What a file costs on the store's file system (the unpack makes one per
# entry of the image; crane writes one per blob).
FILES=$(find "$STORE/layers" -mindepth 3 | wc -l)
CREATE_MS=$(python3 -c '
import os, sys, time
d = sys.argv[1]; os.mkdir(d); t = time.time()
for i in range(1000):
    os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
print(round((time.time() - t) * 1000))' "$WORK/home/create-test")
echo "unpacked entries: $FILES; creating 1000 empty files on the store's file system: $CREATE_MS ms" >"$WORK/res/fs.txt"
cp "$WORK"/res/images-run.json "$WORK"/res/images-pull.json "$WORK"/res/images-interleave.json "$WORK"/res/images-pull-interleave.json "$OUT/"
python3 - "$OUT" "$SIZE" "$((after - before))" "$WORK/repull.txt" <<'EOF' | tee "$OUT/images-summary.txt"
import json, sys
out, size, repull_gets, repull = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def load(n):
    return {r["command"]: r for r in json.load(open(f"{out}/images-{n}.json"))["results"]}
r = load("run")
med = lambda x: sorted(x["times"])[len(x["times"]) // 2]
h, i, fl, f = med(r["host"]), med(r["image"]), med(r["image-flat"]), med(r["image-reflatten"])
print(f"hyperfine: run -- true: {h*1e3:.2f} ms; run --image -- true (overlays): {i*1e3:.2f} ms, ratio {i/h:.2f}; "
      f"flattened copy: {fl*1e3:.2f} ms, ratio {fl/h:.2f}")
il = load("interleave")
ih, ii, ie = il["host"]["median"], il["image"]["median"], il["image-flat"]["median"]
print(f"interleaved: run -- true: {ih*1e3:.2f} ms; run --image -- true (overlays): {ii*1e3:.2f} ms, ratio {ii/ih:.2f} (target <= 1.3); "
      f"flattened copy (through env(1)): {ie*1e3:.2f} ms, ratio {ie/ih:.2f}")
print(f"run --image with HUTCH_IMAGE_ROOT=flattened after the copy was removed (flatten again): {f*1e3:.2f} ms (flatten ~{(f-fl)*1e3:.1f} ms)")
p = load("pull")
c, u = med(p["crane"]), med(p["hutch"])
mib = size / 1048576
nu = med(p["hutch-no-unpack"])
print(f"pull of {mib:.1f} MiB (compressed): crane {c*1e3:.0f} ms ({mib/c:.0f} MiB/s)")
print(f"  hutch image pull --no-unpack (fetch, verify, store blobs: what crane does): {nu*1e3:.0f} ms ({mib/nu:.0f} MiB/s); throughput ratio {c/nu:.2f} (target >= 0.8)")
print(f"  hutch image pull (and unpack: no flattened copy where overlays are used): {u*1e3:.0f} ms ({mib/u:.0f} MiB/s); ratio {c/u:.2f}")
pi = load("pull-interleave")
pc, pn = pi["crane"]["median"], pi["hutch-no-unpack"]["median"]
print(f"interleaved: crane {pc*1e3:.0f} ms, hutch --no-unpack {pn*1e3:.0f} ms: throughput ratio {pc/pn:.2f} (target >= 0.8)")
print(f"pull of a stored image: {repull_gets} blob GETs (target 0); hutch says: " + open(repull).read().splitlines()[-1])
print(open(repull.replace("repull.txt", "res/fs.txt")).read().strip())
EOF
