#!/bin/sh
# Payload of the VM tier's systemd scenario (see systemd.sh): a system
# service runs it as root once the systemd user manager of uid 1000 is up;
# it runs hutch as uid 1000 from this service's root-owned cgroup, where
# nothing is delegated, checks that hutch obtained a delegated transient
# scope from the user manager over D-Bus and enforced its limits there, and
# prints the result marker (with the nonce from the unit's environment).

N=${HUTCH_VM_NONCE:?}
fails=0
ok() { echo "ok   - $*"; }
bad() { fails=$((fails + 1)); echo "FAIL - $*"; }
finish() {
	if [ "$fails" = 0 ]; then echo "HUTCH-VM-RESULT $N: PASS"; else echo "HUTCH-VM-RESULT $N: FAIL $fails check(s)"; fi
	exit 0
}

case "$(cat /proc/cmdline)" in
*hutch.attempt=1*hutch.testhang=1*)
	echo "hutch.testhang=1: the first attempt hangs on purpose"
	sleep 100000
	;;
esac

i=0
while [ ! -S /run/user/1000/bus ] && [ $i -lt 240 ]; do sleep 0.5; i=$((i + 1)); done
if [ ! -S /run/user/1000/bus ]; then
	bad "the user manager's session bus /run/user/1000/bus did not appear"
	systemctl status user@1000.service --no-pager 2>&1 | tail -n 20
	finish
fi
echo "systemd $(systemctl --version | head -n 1); kernel $(uname -r)"
echo "payload cgroup: $(cat /proc/self/cgroup) (owner $(stat -c %U /sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)))"
echo "user@1000.service controllers: $(cat /sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/cgroup.controllers)"

# as_user CMD...: CMD as uid 1000 with the environment of a login session
# (killed after 2 minutes, so that a hang fails the check, not the VM run).
as_user() {
	timeout -k 5 120 setpriv --reuid 1000 --regid 1000 --clear-groups env -i PATH=/usr/local/bin:/usr/bin:/bin \
		HOME=/home/user XDG_RUNTIME_DIR=/run/user/1000 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus "$@"
}
cd /home/user/ws || exit 1
tmp=$(mktemp -d)
chmod 755 "$tmp"

# A watchdog for a hang: after 60 s, show the processes and have every
# hutch dump its goroutines (SIGQUIT), so the log says where it hangs.
( sleep 60; echo "watchdog: still running after 60 s"; ps -eo pid,ppid,stat,pcpu,etime,args | grep -v ' \[' | tail -n 40
  pkill -QUIT -x hutch ) &
watchdog=$!
as_user hutch doctor >"$tmp/doctor" 2>&1
kill $watchdog 2>/dev/null
if grep -q "backend cgroup2-systemd-scope" "$tmp/doctor"; then
	ok "hutch doctor: backend cgroup2-systemd-scope"
else
	bad "hutch doctor does not name the systemd scope backend:"
	cat "$tmp/doctor"
fi

# While a sandbox runs, the supervisor sits in a hutch-*.scope of the user
# manager, with the sandbox's cgroup beneath it. Started the way a terminal
# starts it: in a user scope (not delegated) shared with another process,
# where hutch could only use an ancestor (app.slice) the user manager owns;
# hutch prefers a scope of its own there too.
as_user systemd-run --user --scope --quiet -- sh -c 'sleep 30 & hutch run -- sleep 4; rc=$?; kill $!; exit $rc' >"$tmp/sleep.out" 2>&1 &
sleeper=$!
sleep 2.5
units=$(as_user systemctl --user list-units --all --no-legend 'hutch-*.scope' 2>&1)
echo "user units: $units"
scope=$(echo "$units" | grep -o 'hutch-[0-9]*-[A-Za-z0-9_-]*\.scope' | head -n 1)
sup=$(pgrep -u 1000 -x hutch | head -n 1)
echo "hutch supervisor pid $sup: $(cat /proc/"$sup"/cgroup 2>&1)"
if [ -n "$scope" ] && grep -q "/$scope/hutch-" /proc/"$sup"/cgroup 2>/dev/null; then
	dir=$(find /sys/fs/cgroup/user.slice -type d -name "$scope" | head -n 1)
	echo "scope cgroup: ${dir#/sys/fs/cgroup} owned by $(stat -c %U "$dir"); children: $(ls -d "$dir"/*/ 2>/dev/null | xargs -n1 basename | tr '\n' ' ')"
	if [ "$(stat -c %u "$dir")" = 1000 ] && ls -d "$dir"/hutch-*/ >/dev/null 2>&1; then
		ok "started from a shared user scope, the supervisor moved into its own delegated scope $scope, sandbox cgroups beneath it"
	else
		bad "scope $scope is not delegated to uid 1000 or holds no hutch cgroup"
	fi
else
	bad "the hutch supervisor is not in a hutch scope of the user manager"
fi
wait $sleeper
rc=$?
[ $rc = 0 ] && ok "hutch run -- sleep 4 in the scope: exit 0" ||
	{ bad "hutch run -- sleep: exit $rc"; cat "$tmp/sleep.out"; }

as_user hutch run --memory 64MiB -- awk 'BEGIN { s = "xxxxxxxxxxxxxxxx"; while (1) s = s s }' >"$tmp/mem.out" 2>&1
rc=$?
if [ $rc = 137 ] && grep -q "hutch: killed: memory limit 64MiB exceeded" "$tmp/mem.out"; then
	ok "a memory hog is OOM-killed in the scope's sandbox cgroup: exit 137 and the message"
else
	bad "memory hog: exit $rc"
	cat "$tmp/mem.out"
fi

as_user hutch run --pids 32 -- sh -c 'for i in $(seq 100); do sleep 2 & done 2>/dev/null; wait' >"$tmp/pids.out" 2>&1
if grep -q "hutch: process limit 32 reached:" "$tmp/pids.out"; then
	ok "a fork bomb is refused in the scope: $(grep 'process limit' "$tmp/pids.out")"
else
	bad "fork bomb not reported"
	cat "$tmp/pids.out"
fi

# Nothing is left once hutch has exited: systemd collects the empty scope.
sleep 1
left=$(as_user systemctl --user list-units --all --no-legend 'hutch-*.scope' 2>&1)
cgs=$(find /sys/fs/cgroup/user.slice -type d -name 'hutch-*' 2>/dev/null)
if [ -z "$left" ] && [ -z "$cgs" ]; then
	ok "no hutch scope or cgroup is left after the runs"
else
	bad "left behind: units [$left] cgroups [$cgs]"
fi
finish
