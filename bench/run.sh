#!/usr/bin/env bash
# hutch benchmarks: start latency, steady state, per-command cost and
# memory, measured with hyperfine and reported as ratios against the host
# and against bubblewrap from the SAME hyperfine invocation (one per group).
# Results: bench/results/*.json (hyperfine exports), go-bench.txt,
# stages.txt, memory.txt and summary.txt (the table with pass/fail against
# the targets of docs/PERFORMANCE.md).
#
#   make bench                 # builds bin/hutch, then runs this
#   bash bench/run.sh          # uses $HUTCH_BIN or bin/hutch
#
# Runs as root or as a normal user. As root, every sandbox measurement runs
# as uid/gid 65534 (nobody) with a copy of the binary in a world-readable
# temporary directory and a workspace, HOME and XDG dirs owned by that user.
#
# Knobs (environment): BENCH_RUNS (hyperfine runs per command, default 40),
# BENCH_WARMUP (default 5), BENCH_STAGE_RUNS (--debug runs, default 40),
# BENCH_GO_N (iterations per Go benchmark; default: as many as fit in
# BENCH_GO_TIME, 2s, so that the fast ones average a thousand calls and the
# first calls of a session weigh nothing; 0 skips them),
# BENCH_CRUN=0 (skip the crun reference), BENCH_INSTALL=0 (never apt-get),
# BENCH_NICE (as root, the run's niceness, default -10; 0 = unchanged),
# BENCH_IL_RUNS (rounds of the interleaved cold start, default 100),
# BENCH_IL_STEADY_RUNS (rounds of the interleaved steady state, default 30).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/bench/results
RUNS=${BENCH_RUNS:-40}
WARMUP=${BENCH_WARMUP:-5}
STAGE_RUNS=${BENCH_STAGE_RUNS:-40}
GO_N=${BENCH_GO_N:-}
GO_TIME=${BENCH_GO_TIME:-2s}
BENCHTIME=${GO_N:+${GO_N}x}
BENCHTIME=${BENCHTIME:-$GO_TIME}
SRC_BIN=${HUTCH_BIN:-$ROOT/bin/hutch}
IS_ROOT=0
[ "$(id -u)" = 0 ] && IS_ROOT=1
# Other jobs may share the machine. As root, the whole run (hyperfine and
# every measured command alike) gets a higher CPU priority, nice -10 by
# default, so that their bursts disturb the measurements less.
# BENCH_NICE=0 leaves the priority alone.
NICE=${BENCH_NICE:--10}
if [ "$IS_ROOT" = 1 ] && [ "$NICE" != 0 ]; then
	renice -n "$NICE" -p $$ >/dev/null
fi

say() { printf 'bench: %s\n' "$*" >&2; }
skip() { printf 'bench: SKIP %s\n' "$*" >&2; printf '%s\n' "$*" >>"$OUT/skipped.txt"; }

# --- tools -----------------------------------------------------------------
need_pkg() { # command package
	command -v "$1" >/dev/null 2>&1 && return 0
	if [ "$IS_ROOT" = 1 ] && [ "${BENCH_INSTALL:-1}" != 0 ] && command -v apt-get >/dev/null; then
		say "installing $2 (apt-get)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
	fi
	command -v "$1" >/dev/null 2>&1
}
need_pkg hyperfine hyperfine || { say "hyperfine is required: apt-get install hyperfine"; exit 1; }
need_pkg python3 python3 || { say "python3 is required (summary): apt-get install python3"; exit 1; }
HAVE_BWRAP=1
need_pkg bwrap bubblewrap || HAVE_BWRAP=0
if [ ! -x "$SRC_BIN" ]; then
	say "building $SRC_BIN"
	make -C "$ROOT" build >&2
fi

mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/skipped.txt "$OUT"/stages.txt "$OUT"/memory.txt "$OUT"/go-bench.txt \
	"$OUT"/summary.txt "$OUT"/env.txt "$OUT"/go-inittrace.txt
[ "$HAVE_BWRAP" = 1 ] || skip "bwrap: not installed (apt-get install bubblewrap); bwrap rows left out"

# --- the unprivileged user's world -------------------------------------------
WORK=$(mktemp -d /tmp/hutch-bench.XXXXXX)
chmod 755 "$WORK"
BIN=$WORK/bin/hutch
WS=$WORK/ws              # the workspace (hutch's default: the current dir)
GITWS=$WORK/gitws        # a workspace with a .git, as a project checkout has
UHOME=$WORK/home          # HOME, XDG_CACHE_HOME, XDG_STATE_HOME
UOUT=$WORK/out            # hyperfine writes its JSON here, copied to $OUT
SYNTH=$WORK/etc           # /etc files hutch synthesizes, for bwrap
mkdir -p "$WORK/bin" "$WS" "$GITWS/.git/hooks" "$UHOME/cache" "$UHOME/state" "$UHOME/run" "$UOUT" "$SYNTH"
printf '[core]\n\trepositoryformatversion = 0\n' >"$GITWS/.git/config"
chmod 700 "$UHOME/run"
cp "$SRC_BIN" "$BIN"
chmod 755 "$WORK/bin" "$BIN"
printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n' >"$SYNTH/passwd"
printf 'root:x:0:\nsandbox:x:1000:\n' >"$SYNTH/group"
printf 'hutch\n' >"$SYNTH/hostname"
printf '127.0.0.1 localhost hutch\n::1 localhost\n' >"$SYNTH/hosts"
printf 'nameserver 127.0.0.1\n' >"$SYNTH/resolv.conf"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$SYNTH/nsswitch.conf"
printf '0123456789abcdef0123456789abcdef\n' >"$SYNTH/machine-id"
chmod 644 "$SYNTH"/*

# A ~200-line C file for the compile benchmark.
{
	echo '#include <stddef.h>'
	for i in $(seq 1 24); do
		cat <<EOF
static unsigned long mix$i(const unsigned char *p, size_t n) {
	unsigned long h = ${i}UL * 1099511628211UL;
	for (size_t k = 0; k < n; k++) {
		h ^= p[k] + (h << 6) + (h >> 2);
		h *= 0x100000001b3UL;
	}
	return h ^ (h >> ${i});
}
EOF
	done
	echo 'unsigned long bench_all(const unsigned char *p, size_t n) {'
	echo '	unsigned long h = 0;'
	for i in $(seq 1 24); do echo "	h += mix$i(p, n);"; done
	echo '	return h;'
	echo '}'
} >"$WS/gen.c"

RUNAS=()
BUSER=$(id -un)
if [ "$IS_ROOT" = 1 ]; then
	chown -R 65534:65534 "$WS" "$GITWS" "$UHOME" "$UOUT"
	RUNAS=(setpriv --reuid 65534 --regid 65534 --clear-groups)
	BUSER="nobody (uid 65534)"
fi
UENV=(env -i PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 HOME="$UHOME"
	XDG_CACHE_HOME="$UHOME/cache" XDG_STATE_HOME="$UHOME/state" XDG_RUNTIME_DIR="$UHOME/run")

# as_user CMD...: run CMD as the benchmark user, in the workspace.
as_user() { (cd "$WS" && exec "${RUNAS[@]}" "${UENV[@]}" "$@"); }

CRUN_NAME=hutch-bench-$$
SESSION=hutch-bench-$$
cleanup() {
	[ -n "${SESSION_STARTED:-}" ] && { as_user "$BIN" session stop "$SESSION" >/dev/null 2>&1 || true; }
	if [ -n "${CRUN_STARTED:-}" ]; then
		crun_wrap "${RUNAS[@]}" "${UENV[@]}" crun --root "$WORK/crun/state" kill "$CRUN_NAME" KILL >/dev/null 2>&1 || true
		sleep 0.2
		crun_wrap "${RUNAS[@]}" "${UENV[@]}" crun --root "$WORK/crun/state" delete -f "$CRUN_NAME" >/dev/null 2>&1 || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

# hf GROUP hyperfine-args...: one hyperfine invocation as the user, JSON to
# $OUT/GROUP.json.
hf() {
	local group=$1
	shift
	say "group $group"
	as_user hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" \
		--export-json "$UOUT/$group.json" "$@" >&2
	cp "$UOUT/$group.json" "$OUT/$group.json"
}

# Registry discovery results are cached for ten minutes; `policy show`
# always rediscovers and stores them. Re-warm before each group.
warm() {
	as_user "$BIN" policy show >/dev/null 2>&1 || true
	as_user "$BIN" run -- /bin/true
}

# --- the environment --------------------------------------------------------
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel: $(uname -r)"
	echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
	echo "user: $BUSER"
	echo "hutch: $("$BIN" --version 2>&1 | head -1), $(stat -c %s "$BIN") bytes"
	echo "hyperfine: $(hyperfine --version)"
	[ "$HAVE_BWRAP" = 1 ] && echo "bwrap: $(bwrap --version)"
	echo "runs: $RUNS (warmup $WARMUP), niceness $(ps -o ni= -p $$ | tr -d ' ')"
	echo "loadavg-start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/env.txt"
cat "$OUT/env.txt" >&2

if ! as_user "$BIN" run -- /bin/true; then
	say "hutch run -- /bin/true fails as $BUSER here; nothing to measure"
	exit 1
fi
warm

# bwrap with mounts equivalent to hutch's default: ro /usr and /opt, the
# host's /bin /lib /lib64 /sbin symlinks, the host's /etc read-only with
# synthesized user files over it (and /dev/null over the masked files that
# exist here), private /proc /dev /tmp and HOME, the workspace rw at
# /workspace, cleared environment, uid 1000.
BWRAP=(bwrap --unshare-all --die-with-parent --new-session --uid 1000 --gid 1000 --hostname hutch)
for d in /usr /bin /sbin /lib /lib32 /lib64 /libx32 /opt; do
	if [ -L "$d" ]; then
		BWRAP+=(--symlink "$(readlink "$d")" "$d")
	elif [ -d "$d" ]; then
		BWRAP+=(--ro-bind "$d" "$d")
	fi
done
BWRAP+=(--ro-bind /etc /etc)
for n in shadow shadow- gshadow gshadow- passwd- group- subuid subgid fstab crontab; do
	[ -f "/etc/$n" ] && [ ! -L "/etc/$n" ] && BWRAP+=(--ro-bind /dev/null "/etc/$n")
done
for n in passwd group hostname hosts resolv.conf nsswitch.conf machine-id; do
	[ -f "/etc/$n" ] && [ ! -L "/etc/$n" ] && BWRAP+=(--ro-bind "$SYNTH/$n" "/etc/$n")
done
BWRAP+=(--proc /proc --dev /dev --tmpfs /tmp --tmpfs /home/sandbox --bind "$WS" /workspace
	--chdir /workspace --clearenv --setenv PATH /usr/local/bin:/usr/bin:/bin --setenv HOME /home/sandbox --)
# hyperfine -N splits a command like a shell: quote each word.
q() { local out="" w; for w in "$@"; do out+="$(printf '%q' "$w") "; done; printf '%s' "${out% }"; }
BW=$(q "${BWRAP[@]}")
if [ "$HAVE_BWRAP" = 1 ] && ! as_user "${BWRAP[@]}" /bin/true; then
	skip "bwrap: the equivalent bwrap command fails here; bwrap rows left out"
	HAVE_BWRAP=0
fi

# The bwrap floor: every namespace, ro /usr and the /bin-style symlinks only.
MIN="--ro-bind /usr /usr"
for d in /bin /lib /lib64 /sbin; do [ -L "$d" ] && MIN+=" --symlink $(readlink "$d") $d"; done

# A session (warm sandbox) for `hutch exec`, when this hutch has them; the
# steady-state groups run inside it too.
HAVE_SESSION=0
if as_user "$BIN" session start --help >/dev/null 2>&1 && as_user "$BIN" exec --help >/dev/null 2>&1; then
	if as_user timeout 30 "$BIN" session start --name "$SESSION" >"$WORK/session.out" 2>&1; then
		HAVE_SESSION=1
		SESSION_STARTED=1
		as_user "$BIN" exec "$SESSION" -- /bin/true
	else
		skip "hutch exec: 'hutch session start --name $SESSION' failed: $(tr '\n' ' ' <"$WORK/session.out")"
	fi
else
	skip "hutch exec: this hutch has no sessions ('hutch session start --help' fails)"
fi

# --- cold start ---------------------------------------------------------------
cmds=(-n host /bin/true)
[ "$HAVE_BWRAP" = 1 ] && cmds+=(-n bwrap "$BW /bin/true" -n bwrap-min "bwrap --unshare-all $MIN /bin/true")
cmds+=(-n hutch "$BIN run -- /bin/true" -n hutch-net-none "$BIN run --net none -- /bin/true")
warm
hf cold "${cmds[@]}"

# The same cold starts interleaved (one run of each command per round, 100
# rounds): this machine's drift falls on every command alike, which one
# hyperfine invocation (all runs of one command, then the next) cannot
# promise. Both are reported.
cp "$ROOT/bench/interleave.py" "$WORK/interleave.py"
il=(host /bin/true)
[ "$HAVE_BWRAP" = 1 ] && il+=(bwrap "$BW /bin/true")
il+=(hutch "$BIN run -- /bin/true" hutch-net-none "$BIN run --net none -- /bin/true")
# The workspace above has no .git, so every run makes, protects and removes a
# placeholder .git on the host (see docs/POLICY.md); a project checkout has
# one, and its protected paths cost mounts only.
il+=(hutch-git-workspace "$BIN run --workspace $GITWS -- /bin/true")
warm
say "group cold-interleaved"
as_user python3 "$WORK/interleave.py" "${BENCH_IL_RUNS:-100}" "$WARMUP" "$UOUT/cold-interleaved.json" "${il[@]}"
cp "$UOUT/cold-interleaved.json" "$OUT/cold-interleaved.json"

# --- the pieces -----------------------------------------------------------------
NS="unshare -U -m -p -i -u -C -f --map-root-user"
cmds=(-n host /bin/true -n hutch-version "$BIN --version" -n unshare-user "unshare -U --map-root-user /bin/true"
	-n unshare-6ns "$NS /bin/true" -n unshare-7ns-net "$NS -n /bin/true")
if [ "$HAVE_BWRAP" = 1 ]; then
	cmds+=(-n bwrap-min-share-net "bwrap --unshare-all --share-net $MIN /bin/true"
		-n bwrap-min "bwrap --unshare-all $MIN /bin/true")
fi
hf pieces "${cmds[@]}"

# The init's own start: exec of hutch's static binary as "hutch:init" up to
# its C constructor, which (with no control socket on fd 3) stops at its
# first receive with exit 1, against bash exec'ing /bin/true.
hf execstage -i -n bash-exec-true "bash -c 'exec /bin/true'" \
	-n bash-exec-hutch-init "bash -c 'exec -a hutch:init $BIN 3</dev/null'"

# Go package initialization of the binary (supervisor and init pay it).
say "go inittrace"
for i in $(seq 30); do
	echo "--- run $i"
	as_user env GODEBUG=inittrace=1 "$BIN" --version 2>&1 >/dev/null | grep '^init ' || true
done >"$OUT/go-inittrace.txt"

# --- registry discovery: what a short command pays when the cache is cold ------
# (the cache is written only when discovery finishes before the command
# does, so a user who runs only short commands always has it cold).
hf discovery --prepare "sh -c 'rm -f $UHOME/cache/hutch/registries-*.json'" \
	-n hutch-discovery-cold "$BIN run -- /bin/true" \
	-n hutch-no-discover "$BIN run --no-discover -- /bin/true"

# --- steady state -----------------------------------------------------------------
# 200 iterations as the target says, and 1000 in the same invocation so
# that the marginal cost of one fork+exec inside (startup excluded) can be
# computed: (t1000 - t200) / 800.
LOOP="sh -c 'i=0; while [ \$i -lt 200 ]; do /bin/true; i=\$((i+1)); done'"
LOOPK="sh -c 'i=0; while [ \$i -lt 1000 ]; do /bin/true; i=\$((i+1)); done'"
cmds=(-n host "$LOOP")
[ "$HAVE_BWRAP" = 1 ] && cmds+=(-n bwrap "$BW $LOOP")
cmds+=(-n hutch "$BIN run -- $LOOP")
[ "$HAVE_SESSION" = 1 ] && cmds+=(-n hutch-exec "$BIN exec $SESSION -- $LOOP")
cmds+=(-n host-1000 "$LOOPK")
[ "$HAVE_BWRAP" = 1 ] && cmds+=(-n bwrap-1000 "$BW $LOOPK")
cmds+=(-n hutch-1000 "$BIN run -- $LOOPK")
[ "$HAVE_SESSION" = 1 ] && cmds+=(-n hutch-exec-1000 "$BIN exec $SESSION -- $LOOPK")
warm
hf loop200 "${cmds[@]}"

GCC="gcc -O2 -c gen.c -o gen.o"
if command -v gcc >/dev/null; then
	cmds=(-n host "$GCC")
	[ "$HAVE_BWRAP" = 1 ] && cmds+=(-n bwrap "$BW $GCC")
	cmds+=(-n hutch "$BIN run -- $GCC")
	[ "$HAVE_SESSION" = 1 ] && cmds+=(-n hutch-exec "$BIN exec $SESSION -- $GCC")
	warm
	hf gcc "${cmds[@]}"
else
	skip "gcc: not installed; compile benchmark left out"
fi

# The same steady state interleaved (one run of each command per round,
# BENCH_IL_STEADY_RUNS rounds, default 30): the loop's host median moved by
# 10% between hyperfine invocations of one run, more than the 5% the target
# allows, and interleaving puts that drift on every command alike.
il=(host "$LOOP")
[ "$HAVE_BWRAP" = 1 ] && il+=(bwrap "$BW $LOOP")
il+=(hutch "$BIN run -- $LOOP")
[ "$HAVE_SESSION" = 1 ] && il+=(hutch-exec "$BIN exec $SESSION -- $LOOP")
if command -v gcc >/dev/null; then
	il+=(gcc-host "$GCC")
	[ "$HAVE_BWRAP" = 1 ] && il+=(gcc-bwrap "$BW $GCC")
	il+=(gcc-hutch "$BIN run -- $GCC")
	[ "$HAVE_SESSION" = 1 ] && il+=(gcc-hutch-exec "$BIN exec $SESSION -- $GCC")
fi
warm
say "group steady-interleaved"
as_user python3 "$WORK/interleave.py" "${BENCH_IL_STEADY_RUNS:-30}" "$WARMUP" "$UOUT/steady-interleaved.json" "${il[@]}"
cp "$UOUT/steady-interleaved.json" "$OUT/steady-interleaved.json"

# The steady state without any start, in paired chunks (paired.py): a
# worker on the host (also one with the sandbox's environment), one in
# bwrap and one in the session (hutch exec) run
# chunks timed by their own clock, taking turns: 100 /bin/true per chunk,
# BENCH_PAIRS rounds (default 300), then 2 gcc compiles per chunk,
# BENCH_GCC_PAIRS rounds (default 60). Comparing chunks that ran within a
# fraction of a second of each other takes this VM's drift out.
if [ "$HAVE_SESSION" = 1 ]; then
	say "steady state in paired chunks"
	pc=(host "sh -c")
	# The host with the environment a sandboxed command gets (the proxy
	# variables: 21 against the host's 6 here), which glibc's and dash's
	# start-up read on every exec: the environment's share of the ratio.
	mapfile -t SENV < <(as_user "$BIN" exec "$SESSION" -- env | grep -v '^PWD=')
	[ "${#SENV[@]}" -gt 0 ] && pc+=(host-sandbox-env "$(q env -i "${SENV[@]}") sh -c")
	[ "$HAVE_BWRAP" = 1 ] && pc+=(bwrap "$BW sh -c")
	pc+=(hutch-exec "$(q "$BIN" exec "$SESSION" --) sh -c")
	cp "$ROOT/bench/paired.py" "$WORK/paired.py"
	as_user python3 "$WORK/paired.py" "${BENCH_PAIRS:-300}" 100 /bin/true "$UOUT/paired.json" "${pc[@]}"
	cp "$UOUT/paired.json" "$OUT/paired.json"
	if command -v gcc >/dev/null; then
		as_user python3 "$WORK/paired.py" "${BENCH_GCC_PAIRS:-60}" 2 "$GCC" "$UOUT/paired-gcc.json" "${pc[@]}"
		cp "$UOUT/paired-gcc.json" "$OUT/paired-gcc.json"
	fi
fi

# --- exec into a running session / container --------------------------------------
CRUN_OK=0
crun_wrap() { "$@"; }
setup_crun() {
	[ "${BENCH_CRUN:-1}" = 0 ] && { skip "crun: BENCH_CRUN=0"; return 1; }
	need_pkg crun crun || { skip "crun: not installed (apt-get install crun, as root)"; return 1; }
	# crun refuses a v1/v2 hybrid cgroup layout whose v2 part has
	# controllers. As root, give crun a private mount namespace in which
	# /sys/fs/cgroup/unified is an empty tmpfs (the host's mounts are not
	# touched); it then runs with cgroups disabled, like rootless crun
	# without delegation.
	if [ "$(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ] &&
		grep -q . /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null; then
		if [ "$IS_ROOT" != 1 ]; then
			skip "crun: hybrid cgroup layout with v2 controllers, which rootless crun refuses (run as root to hide it)"
			return 1
		fi
		crun_wrap() { unshare -m --propagation private sh -c 'mount -t tmpfs none /sys/fs/cgroup/unified && exec "$@"' sh "$@"; }
	fi
	local b=$WORK/crun
	mkdir -p "$b/state" "$b/exec/rootfs" "$b/cold"
	(cd "$b/exec" && crun spec --rootless)
	(
		cd "$b/exec/rootfs"
		for l in bin lib lib64 sbin; do [ -L "/$l" ] && ln -s "$(readlink "/$l")" "$l"; done
		mkdir -p usr etc tmp workspace proc dev sys
	)
	python3 - "$b/exec/config.json" "$WS" <<'EOF'
import json, sys
path, ws = sys.argv[1], sys.argv[2]
d = json.load(open(path))
d["process"]["terminal"] = False
d["process"]["args"] = ["/bin/sleep", "infinity"]
d["process"]["cwd"] = "/workspace"
d["root"] = {"path": "rootfs", "readonly": True}
m = [x for x in d["mounts"] if x["destination"] != "/sys/fs/cgroup"]
m += [{"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
      {"destination": "/etc", "type": "bind", "source": "/etc", "options": ["rbind", "ro"]},
      {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
      {"destination": "/workspace", "type": "bind", "source": ws, "options": ["rbind", "rw"]}]
d["mounts"] = m
d.get("linux", {}).pop("cgroupsPath", None)
json.dump(d, open(path, "w"), indent=1)
d["process"]["args"] = ["/bin/true"]
json.dump(d, open(path.replace("/exec/", "/cold/"), "w"), indent=1)
EOF
	ln -s ../exec/rootfs "$b/cold/rootfs"
	[ "$IS_ROOT" = 1 ] && chown -R 65534:65534 "$b"
	if ! crun_wrap "${RUNAS[@]}" "${UENV[@]}" crun --cgroup-manager=disabled --root "$b/state" run -d --bundle "$b/exec" "$CRUN_NAME" </dev/null >/dev/null 2>"$WORK/crun.err"; then
		skip "crun: cannot start a rootless container here: $(tr '\n' ' ' <"$WORK/crun.err")"
		return 1
	fi
	CRUN_STARTED=1
}
cmds=(-n host /bin/true)
if setup_crun; then
	CRUN_OK=1
	C="crun --cgroup-manager=disabled --root $WORK/crun/state"
	cmds+=(-n crun-exec "$C exec $CRUN_NAME /bin/true" -n crun-run "$C run --bundle $WORK/crun/cold $CRUN_NAME-cold")
fi
[ "$HAVE_SESSION" = 1 ] && cmds+=(-n hutch-exec "$BIN exec $SESSION -- /bin/true")
if [ "$CRUN_OK" = 1 ] || [ "$HAVE_SESSION" = 1 ]; then
	say "group exec"
	crun_wrap "${RUNAS[@]}" "${UENV[@]}" sh -c 'cd "$1" && shift && exec "$@"' sh "$WS" \
		hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" --export-json "$UOUT/exec.json" "${cmds[@]}" >&2
	cp "$UOUT/exec.json" "$OUT/exec.json"
	# The same execs interleaved (100 rounds), which the verdict uses: in
	# run 25 a slow phase of this VM fell on hutch exec's 40 runs alone
	# (4.5 ms, 2 ms before and after).
	il=(host /bin/true)
	[ "$CRUN_OK" = 1 ] && il+=(crun-exec "$C exec $CRUN_NAME /bin/true")
	[ "$HAVE_SESSION" = 1 ] && il+=(hutch-exec "$BIN exec $SESSION -- /bin/true")
	say "group exec-interleaved"
	crun_wrap "${RUNAS[@]}" "${UENV[@]}" sh -c 'cd "$1" && shift && exec "$@"' sh "$WS" \
		python3 "$WORK/interleave.py" "${BENCH_IL_RUNS:-100}" "$WARMUP" "$UOUT/exec-interleaved.json" "${il[@]}"
	cp "$UOUT/exec-interleaved.json" "$OUT/exec-interleaved.json"
fi
SESSION_MEM=""
if [ "$HAVE_SESSION" = 1 ]; then
	# The session's supervisor after serving every exec above.
	spid=$(as_user "$BIN" session ls 2>/dev/null | awk -v n="$SESSION" '$1 == n {print $2}')
	if [ -n "$spid" ] && [ -r "/proc/$spid/status" ]; then
		ipid=""
		for c in $(cat /proc/"$spid"/task/*/children 2>/dev/null); do
			[ "$(tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null)" = "hutch:init " ] && ipid=$c
		done
		SESSION_MEM="session-serve supervisor_rss_max_kb=$(awk '/^VmRSS:/{print $2}' "/proc/$spid/status")"
		SESSION_MEM+=" supervisor_hwm_kb=$(awk '/^VmHWM:/{print $2}' "/proc/$spid/status")"
		SESSION_MEM+=" init_rss_max_kb=$( [ -n "$ipid" ] && awk '/^VmRSS:/{print $2}' "/proc/$ipid/status" || echo 0) samples=1"
	fi
	as_user "$BIN" session stop "$SESSION" >/dev/null 2>&1 || true
	SESSION_STARTED=
fi

# --- per-stage timings (--debug) ---------------------------------------------------------
say "stages ($STAGE_RUNS runs of hutch run --debug)"
warm
as_user bash -c '
	for i in $(seq "$1"); do
		s=$EPOCHREALTIME
		"$2" run --debug -- /bin/true 2>&1 >/dev/null | grep "^hutch: timing"
		e=$EPOCHREALTIME
		d=$(( ${e/./} - ${s/./} ))
		printf "hutch: timing wall %d.%03d ms\n" $((d / 1000)) $((d % 1000))
	done' bash "$STAGE_RUNS" "$BIN" >"$OUT/stages.txt"

# --- resident memory ---------------------------------------------------------------------
# memsample LABEL CMD...: start CMD (as the user) and sample the VmRSS of
# the process and of its child named hutch:init every 10 ms until it ends.
memsample() {
	local label=$1
	shift
	# Not through as_user: $! must be the process that becomes hutch.
	(cd "$WS" && exec "${RUNAS[@]}" "${UENV[@]}" "$@") >/dev/null 2>&1 &
	local pid=$! maxs=0 maxi=0 hwm=0 n=0 v k ipid=""
	while [ -d "/proc/$pid" ]; do
		while read -r k v _; do
			[ "$k" = VmRSS: ] && [ "$v" -gt "$maxs" ] && maxs=$v
			[ "$k" = VmHWM: ] && hwm=$v
		done <"/proc/$pid/status" 2>/dev/null || true
		if [ -z "$ipid" ]; then
			for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
				[ "$(tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null)" = "hutch:init " ] && ipid=$c
			done
		fi
		if [ -n "$ipid" ]; then
			v=$(awk '/^VmRSS:/{print $2}' "/proc/$ipid/status" 2>/dev/null || echo 0)
			[ -n "$v" ] && [ "$v" -gt "$maxi" ] && maxi=$v
		fi
		n=$((n + 1))
		sleep 0.01
	done
	wait "$pid" || true
	echo "$label supervisor_rss_max_kb=$maxs supervisor_hwm_kb=$hwm init_rss_max_kb=$maxi samples=$n"
}
say "memory"
warm
{
	memsample hutch "$BIN" run -- sleep 2
	memsample hutch-net-none "$BIN" run --net none -- sleep 2
	[ -n "$SESSION_MEM" ] && echo "$SESSION_MEM"
	[ "$HAVE_BWRAP" = 1 ] && memsample bwrap "${BWRAP[@]}" sleep 2
} >"$OUT/memory.txt"
cat "$OUT/memory.txt" >&2

# --- Go benchmarks (API, warm sandbox, namespaces) ------------------------------------
if [ "$GO_N" = 0 ]; then
	skip "go benchmarks: BENCH_GO_N=0"
elif ! command -v go >/dev/null; then
	skip "go benchmarks: no go toolchain"
else
	say "go benchmarks (-benchtime $BENCHTIME)"
	if (cd "$ROOT" && CGO_ENABLED=1 GOFLAGS=-mod=mod go test -c -o "$WORK/bin/bench.test" ./bench/) >&2; then
		chmod 755 "$WORK/bin/bench.test"
		warm
		as_user env HUTCH_BIN="$BIN" TMPDIR="$UHOME" "$WORK/bin/bench.test" -test.run '^$' -test.bench . \
			-test.benchtime "$BENCHTIME" -test.count 1 >"$OUT/go-bench.txt" 2>&1 || true
		cat "$OUT/go-bench.txt" >&2
	else
		skip "go benchmarks: go test -c ./bench/ failed"
	fi
fi

echo "loadavg-end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/env.txt"
python3 "$ROOT/bench/summarize.py" "$OUT" | tee "$OUT/summary.txt"
