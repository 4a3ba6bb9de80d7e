#!/bin/sh
# Smoke test of hutch on the VM tier's cgroup v2 host (see docs/TESTING.md).
# run.sh runs it inside the VM as uid 1000 from /home/user/ws, with
# HUTCH_VM_SCENARIO (delegated, nodelegation, nouserns) and HUTCH_VM_CGROUP
# (the payload's cgroup) set. Busybox sh: keep it POSIX.
#
# Prints "ok - ..." or "FAIL - ..." per check and a record of the host
# (kernel, LSMs, cgroups); exits 1 when a check failed.

H=${HUTCH:-/hutch}
scenario=${HUTCH_VM_SCENARIO:-delegated}
fails=0
checks=0
STRICT_ERR=
ok() { checks=$((checks + 1)); echo "ok   - $*"; }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL - $*"; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# hrun ARGS...: run hutch, leaving RC, OUT (stdout) and ERR (stderr).
hrun() {
	"$H" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	RC=$?
	OUT=$(cat "$tmp/out")
	ERR=$(cat "$tmp/err")
}
# expect WHAT WANT_RC WANT_OUT: check the last hrun (WANT_OUT "*" = any).
expect() {
	if [ "$RC" = "$2" ] && { [ "$3" = "*" ] || [ "$OUT" = "$3" ]; }; then
		ok "$1"
	else
		bad "$1: exit $RC (want $2), stdout [$OUT] (want [$3]), stderr [$ERR]"
	fi
}

# doctor_images GLOB: hutch doctor's images row matches GLOB.
doctor_images() {
	hrun doctor
	row=$(echo "$OUT" | grep '^  images ')
	# shellcheck disable=SC2254 # GLOB is a pattern
	case "$row" in
	$1) ok "doctor: $row" ;;
	*) bad "doctor's images row: [$row] (want $1)" ;;
	esac
}

echo "== record"
echo "kernel: $(uname -r) ($(uname -v))"
echo "scenario: $scenario; running as $(id)"
if [ -r /sys/kernel/security/lsm ]; then
	echo "lsm: $(cat /sys/kernel/security/lsm)"
else
	echo "lsm: /sys/kernel/security/lsm not readable (securityfs not mounted?)"
fi
echo "userns: user.max_user_namespaces=$(cat /proc/sys/user/max_user_namespaces)," \
	"kernel.unprivileged_userns_clone=$(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo absent)"
echo "/proc/self/cgroup: $(cat /proc/self/cgroup)"
cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
echo "cgroup2 mount: $(grep ' /sys/fs/cgroup ' /proc/self/mounts)"
echo "root cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
# The delegated directory is user@1000.service; without delegation, the
# payload's own parent is the nearest directory that matters.
deleg=/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service
[ -d "$deleg" ] || deleg=${cg%/*}
for d in "$deleg" "$cg"; do
	echo "${d#/sys/fs/cgroup}: controllers [$(cat "$d/cgroup.controllers")] subtree_control [$(cat "$d/cgroup.subtree_control")]"
	echo "  $(ls -ld "$d" | awk '{print $1, $3":"$4}') dir; cgroup.procs $(ls -l "$d/cgroup.procs" | awk '{print $1, $3":"$4}')"
done
if [ -w "$deleg/cgroup.procs" ] && [ -w "$deleg/cgroup.subtree_control" ]; then
	echo "delegation: uid $(id -u) may manage ${deleg#/sys/fs/cgroup}"
else
	echo "delegation: none for uid $(id -u) (a limits backend must fall back to rlimits)"
fi
hrun --version
echo "hutch: $OUT"

echo "== checks ($scenario)"
# The cgroup layout run.sh promised for this scenario.
case "$scenario" in
delegated | nouserns)
	if [ -w "$deleg/cgroup.procs" ] && [ -w "$deleg/cgroup.subtree_control" ] && [ -w "$cg/cgroup.procs" ]; then
		ok "cgroup: ${deleg#/sys/fs/cgroup} is delegated to uid 1000"
	else
		bad "cgroup: ${deleg#/sys/fs/cgroup} is not delegated to uid 1000"
	fi
	for c in memory pids cpu; do
		case " $(cat "$deleg/cgroup.subtree_control") " in
		*" $c "*) ok "cgroup: $c is enabled for the delegated subtree" ;;
		*) bad "cgroup: $c is not enabled in ${deleg#/sys/fs/cgroup}/cgroup.subtree_control" ;;
		esac
	done
	# What a limits backend will do: a child cgroup of the delegated
	# directory, a limit, a process moved in (only leaves hold processes).
	d=$deleg/hutch-smoke
	if mkdir "$d" && echo 4 >"$d/pids.max" && echo 64M >"$d/memory.max"; then
		sh -c "echo \$\$ >$d/cgroup.procs || exit 9; for i in 1 2 3 4 5 6; do sleep 1 & done; wait" 2>/dev/null
		prc=$?
		ev=$(sed -n 's/^max //p' "$d/pids.events")
		if [ "$prc" != 9 ] && [ "${ev:-0}" -gt 0 ]; then
			ok "cgroup: uid 1000 made a child cgroup, moved a process in, and pids.max=4 held (pids.events max $ev)"
		else
			bad "cgroup: child cgroup under the delegation: move exit $prc, pids.events max [${ev}]"
		fi
		# ash gives up at the first failed fork: sleeps may be left.
		echo 1 >"$d/cgroup.kill"
		i=0
		while grep -q '^populated 1' "$d/cgroup.events" && [ $i -lt 50 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		rmdir "$d" && ok "cgroup: cgroup.kill emptied the child cgroup and uid 1000 removed it" ||
			bad "cgroup: cannot remove $d: $(tr '\n' ' ' <"$d/cgroup.procs")"
	else
		bad "cgroup: uid 1000 cannot create $d with limits"
		rmdir "$d" 2>/dev/null
	fi
	;;
nodelegation)
	if [ ! -w "$cg/cgroup.procs" ] && [ ! -w "${cg%/*}/cgroup.subtree_control" ] &&
		! mkdir "${cg%/*}/hutch-smoke" 2>/dev/null; then
		ok "cgroup: nothing is delegated to uid 1000 (no write, no mkdir)"
	else
		bad "cgroup: something under ${cg%/*} is writable by uid 1000"
		rmdir "${cg%/*}/hutch-smoke" 2>/dev/null
	fi
	;;
esac

if [ "$scenario" = nouserns ]; then
	hrun doctor
	if [ "$RC" = 1 ] && echo "$OUT" | grep -q "cannot be made"; then
		ok "hutch doctor exits 1 and says no sandbox can be made"
	else
		bad "hutch doctor without user namespaces: exit $RC, [$OUT]"
	fi
	hrun run -- true
	case "$ERR" in
	*"user namespace"*) msg=1 ;;
	*) msg=0 ;;
	esac
	if [ "$RC" = 125 ] && [ $msg = 1 ]; then
		ok "without user namespaces, hutch refuses with exit 125 and says why"
	else
		bad "without user namespaces: exit $RC (want 125), stderr [$ERR] (want a mention of user namespaces)"
	fi
	echo "   stderr: $ERR"
	if [ -r /img-plain.tar ]; then
		# The store works without user namespaces; an image's root is its
		# flattened copy (the probe cannot mount an overlay), built at the
		# import, and doctor says so with the probe's reason.
		hrun image import --tag vm.test/plain:1 /img-plain.tar
		expect "image import without user namespaces" 0 "*"
		hrun image inspect vm.test/plain:1
		case "$OUT" in
		*'"root": "/'*) ok "without user namespaces the import builds the image's flattened copy" ;;
		*) bad "without user namespaces: no flattened copy after the import: [$OUT] [$ERR]" ;;
		esac
		doctor_images '*flattened copy*: *'
	fi
	echo "== $checks checks, $fails failed"
	[ $fails = 0 ]
	exit
fi

hrun run -- id -u
expect "the command runs as uid 1000" 0 1000

hrun run -- sh -c 'grep NoNewPrivs /proc/self/status'
expect "no_new_privs is set" 0 "NoNewPrivs:	1"

# The VM's /etc/passwd names "hutch test user"; the sandbox's must not.
hrun run -- sh -c 'cat /etc/passwd; ls -d /home/user 2>/dev/null; true'
case "$OUT" in
*"hutch test user"* | */home/user*) bad "the host's /etc/passwd or /home/user is visible: [$OUT]" ;;
*sandbox*) ok "the host's /etc/passwd and home are not visible" ;;
*) bad "no synthesized /etc/passwd: exit $RC [$OUT] [$ERR]" ;;
esac

hrun run -- sh -c 'touch /usr/hutch-smoke'
if [ "$RC" != 0 ] && [ ! -e /usr/hutch-smoke ]; then
	ok "a write to /usr fails (exit $RC: $ERR)"
else
	bad "a write to /usr: exit $RC, /usr/hutch-smoke $( [ -e /usr/hutch-smoke ] && echo exists || echo missing)"
fi

echo data >"$PWD/in.txt"
hrun run -- sh -c 'cat in.txt && echo out >out.txt'
if [ "$RC" = 0 ] && [ "$OUT" = data ] && [ "$(cat out.txt 2>/dev/null)" = out ]; then
	ok "the workspace is read-write at /workspace"
else
	bad "workspace: exit $RC, stdout [$OUT], out.txt [$(cat out.txt 2>/dev/null)], stderr [$ERR]"
fi

start=$(cut -d' ' -f1 /proc/uptime)
hrun run --timeout 1s -- sleep 100
took=$(awk -v a="$start" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }')
if [ "$RC" = 124 ] && awk -v t="$took" 'BEGIN { exit !(t < 20) }'; then
	ok "--timeout 1s ends sleep 100 with exit 124 (in ${took}s)"
else
	bad "--timeout 1s: exit $RC (want 124) after ${took}s, stderr [$ERR]"
fi
if pidof sleep >/dev/null 2>&1; then
	bad "a sleep survived the timeout: pid $(pidof sleep)"
else
	ok "no process survives the timeout"
fi

hrun run -- cat /proc/self/cgroup
echo "   sandbox /proc/self/cgroup: $OUT"

# Landlock on this kernel (6.1: ABI 2, the best-effort path). /proc is
# read-only under hutch's rules, so with Landlock a write to
# oom_score_adj (allowed to any process, upward) is denied.
case ",$(cat /sys/kernel/security/lsm 2>/dev/null)," in
*,landlock,*)
	hrun run -- sh -c 'echo 500 >/proc/self/oom_score_adj'
	if [ "$RC" != 0 ]; then
		ok "Landlock is applied (best effort): a write to /proc/self/oom_score_adj fails"
	else
		bad "Landlock is active in the kernel, but the sandbox could write /proc/self/oom_score_adj"
	fi
	printf 'version = 1\nenforcement = "strict"\n' >"$tmp/strict.toml"
	hrun run --policy "$tmp/strict.toml" -- true
	STRICT_ERR=$ERR
	echo "   enforcement = \"strict\" on this kernel: exit $RC; stderr: $(echo "$ERR" | head -n 5)"
	;;
*) echo "   Landlock is not among the active LSMs: its checks are skipped" ;;
esac
printf 'version = 1\nenforcement = "best-effort"\n' >"$tmp/be.toml"
hrun run --policy "$tmp/be.toml" -- true
echo "   enforcement = \"best-effort\": exit $RC; stderr: [$(echo "$ERR" | head -n 5)]"
expect "best-effort enforcement runs on this kernel" 0 ""
# Best effort warns once per user and host (the first run above did), and
# logs the gaps every time.
echo "== resource limits ($scenario)"
hrun doctor
case "$scenario" in
delegated) want=cgroup2-delegated ;;
*) want=rlimit ;;
esac
if [ "$RC" = 0 ] && echo "$OUT" | grep -q "backend $want"; then
	ok "hutch doctor reports backend $want and a working sandbox"
else
	bad "hutch doctor: exit $RC, wanted backend $want: [$OUT]"
fi
echo "$OUT" | sed -n '/what a sandbox gets/,$p'
case "$scenario" in
delegated | nodelegation)
	# The same words on both backends: the kernel's OOM killer and
	# pids.events in a cgroup; without one, the supervisor's watchdog
	# (it kills the largest process; RLIMIT_NPROC refuses, and the watchdog
	# reports the limit when a look finds it reached).
	by="cgroup v2"
	[ "$scenario" = nodelegation ] && by="rlimit (the watchdog)"
	# A memory hog: a string that doubles until memory runs out.
	hrun run --memory 64MiB -- awk 'BEGIN { s = "xxxxxxxxxxxxxxxx"; while (1) s = s s }'
	case "$ERR" in
	*"hutch: killed: memory limit 64MiB exceeded"*) [ "$RC" = 137 ] && ok "$by: a memory hog is killed with exit 137 and the message" || bad "$by: memory hog: exit $RC" ;;
	*) bad "$by: memory hog: exit $RC, stderr [$ERR]" ;;
	esac
	# A subshell forks until refused and gives up (ash does at the first
	# refusal), leaving its sleeps with the reaper; the sleep 2 then takes
	# the last slot and holds the limit for the watchdog to see.
	hrun run --pids 32 -- sh -c '(for i in $(seq 100); do sleep 5 & done) 2>/dev/null; sleep 2; echo held'
	case "$ERR" in
	*"hutch: process limit 32 reached:"*) ok "$by: a fork bomb is refused and reported: $(echo "$ERR" | grep 'process limit')" ;;
	*) bad "$by: fork bomb: exit $RC, stderr [$ERR]" ;;
	esac
	;;
esac
if [ -r /img-plain.tar ] && [ -r /img-opaque.tar ]; then
	echo "== images ($scenario)"
	# img-plain: busybox and two layers sharing /opt, the upper whiting
	# out a lower file: /opt is an overlay of both. img-opaque: the same
	# with an opaque directory, whose marker (user.overlay.opaque) this
	# kernel's tmpfs (the store's file system here) cannot hold before
	# Linux 6.6: that image's root is its flattened copy, with the reason.
	want=$(printf 'upper\nkeep\nno gone')
	show='cat /opt/f /opt/keep; [ -e /opt/gone ] && echo gone || echo no gone; awk '"'"'$5 == "/opt" && $(NF-2) == "overlay" {print "overlay"}'"'"' /proc/self/mountinfo'
	for img in plain opaque; do
		hrun image import --tag vm.test/$img:1 /img-$img.tar
		expect "image import $img" 0 "*"
	done
	hrun run --image vm.test/plain:1 -- /bin/sh -c "$show"
	expect "an image's root is overlays of its layers on $(uname -r)" 0 "$want
overlay"
	hrun run --image vm.test/opaque:1 -- /bin/sh -c "$show; ls /opt/opq"
	expect "an image with an opaque directory, on tmpfs without user xattrs: its flattened copy, the opaque directory honoured" 0 "$want
new"
	hrun image inspect vm.test/opaque:1
	case "$OUT" in
	*'"not_overlay": '*) ok "image inspect says why the layer has no overlay form: $(echo "$OUT" | grep -o '"not_overlay": "[^"]*"' | head -1)" ;;
	*) bad "image inspect names no reason for the flattened copy: [$OUT]" ;;
	esac
	doctor_images '*overlays of its layers*'
fi

if [ "$scenario" = delegated ]; then
	hrun run --security-log "$tmp/sec.log" --cpus 0.5 -- sh -c 'i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done'
	if grep -q '"subject":"cpu throttled"' "$tmp/sec.log" 2>/dev/null; then
		ok "cgroup v2: --cpus 0.5 throttles a spinner ($(grep -o '"msg":"cpu limit[^"]*"' "$tmp/sec.log" | head -1))"
	else
		bad "cgroup v2: no throttling recorded for --cpus 0.5 (exit $RC)"
	fi
	populated=$(grep -l '^populated 1' $(find /sys/fs/cgroup -path '*/hutch-[0-9]*' -name cgroup.events 2>/dev/null) 2>/dev/null | grep -v supervisor)
	if [ -z "$populated" ]; then
		ok "cgroup v2: no populated sandbox cgroup is left after the runs"
	else
		bad "cgroup v2: populated hutch cgroups left: $populated"
	fi
	echo "   hutch cgroups now: $(find /sys/fs/cgroup -maxdepth 7 -name 'hutch-[0-9]*' -type d 2>/dev/null | tr '\n' ' ')"
fi

echo "== $checks checks, $fails failed"
[ $fails = 0 ]
