#!/bin/sh
# /init of hutch's VM test tier (see docs/TESTING.md). run.sh packs this file
# into the initramfs with busybox, the kernel modules, the payload files and
# /vm/config; the kernel runs it as pid 1.
#
# Stage 1 (on the initramfs): the initramfs root cannot be pivot_root'ed, and
# hutch pivots, so copy everything onto a tmpfs and switch_root to it.
# Stage 2 (on the tmpfs, argument "stage2"): mount the API file systems, set
# up cgroup v2 the way systemd does for a logged-in user (scenario-dependent),
# run the payload as uid 1000 and print the result marker on the console,
# then power off.
#
# /vm/config (root-only, written by run.sh) sets SCENARIO, NONCE,
# GUEST_TIMEOUT, CONTROLLERS and MODULES; /vm/run is the payload command.

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

# Markers carry a per-run nonce from the root-only /vm/config, so that the
# payload (uid 1000) cannot print a convincing one.
marker() { echo "HUTCH-VM-$1 $NONCE: $2"; }

die() {
	echo "init: $*"
	marker RESULT "FAIL init"
	halt_vm
}

halt_vm() {
	sync
	poweroff -f
	sleep 2
	# With qemu's -no-reboot, a reboot ends qemu too.
	reboot -f
}

if [ "$1" != stage2 ]; then
	# The kernel gave us no console (the initramfs has no /dev/console).
	mount -t devtmpfs devtmpfs /dev
	exec 0</dev/console 1>/dev/console 2>&1
	mount -t tmpfs -o mode=0755 root /newroot || exec sh
	for e in /*; do
		case "$e" in /newroot | /dev | /proc | /sys) continue ;; esac
		cp -a "$e" /newroot/ || exec sh
	done
	mkdir -p /newroot/dev /newroot/proc /newroot/sys
	# Whoever packed the archive, root owns the system files.
	chown -R 0:0 /newroot
	mount --move /dev /newroot/dev
	exec switch_root /newroot /init stage2
	echo "init: switch_root failed"
	exec sh
fi

# ---- stage 2 ----
. /vm/config || { NONCE=none; die "no /vm/config"; }
umask 022
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts -o mode=0620,ptmxmode=0666,gid=5 devpts /dev/pts
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
# What udev (or initramfs-tools) adds to devtmpfs on every real host.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mount -t securityfs securityfs /sys/kernel/security
# What systemd does on a pure v2 host.
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup ||
	mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup || die "cannot mount cgroup2"
hostname hutch-vm
ip link set lo up
for m in $MODULES; do
	insmod "/lib/modules/$m.ko" || die "insmod $m"
done

marker BOOTED "uptime $(cut -d' ' -f1 /proc/uptime)s kernel $(uname -r)"

# The test user, with a home and a workspace of its own.
cat >/etc/passwd <<'EOF'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:hutch test user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >/etc/group <<'EOF'
root:x:0:
tty:x:5:
user:x:1000:
nogroup:x:65534:
EOF
chmod 644 /etc/passwd /etc/group
mkdir -p /root /home/user/ws
chmod 700 /root
chown -R 1000:1000 /home/user
chmod 755 /home/user

# as_user CMD...: run CMD as uid/gid 1000 with a clean environment. (The
# "--" keeps su's getopt off CMD's options.)
as_user() {
	su -s /bin/sh -c 'exec "$0" "$@"' user -- env -i \
		PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/home/user USER=user LOGNAME=user \
		SHELL=/bin/sh LANG=C.UTF-8 TMPDIR=/tmp HUTCH_VM_SCENARIO="$SCENARIO" HUTCH_VM_CGROUP="$payload_cg" \
		"$@"
}
payload_cg=

# ---- cgroup v2, as systemd sets it up for uid 1000 ----
cg=/sys/fs/cgroup
cg_enable() { # enable DIR: turn on $CONTROLLERS for DIR's children
	for c in $CONTROLLERS; do
		echo "+$c" >"$1/cgroup.subtree_control" || die "cannot enable $c in $1"
	done
}
cg_enable $cg
mkdir -p $cg/init.scope
echo $$ >$cg/init.scope/cgroup.procs # the root cgroup keeps no process of ours
mkdir -p $cg/user.slice/user-1000.slice
cg_enable $cg/user.slice
cg_enable $cg/user.slice/user-1000.slice
case "$SCENARIO" in
nodelegation)
	# A login session (ssh, console): a root-owned scope, nothing delegated.
	leaf=$cg/user.slice/user-1000.slice/session-1.scope
	mkdir $leaf
	;;
delegated | nouserns)
	# Delegate=yes on user@1000.service: the directory and the three files
	# that move processes and enable controllers belong to the user.
	svc=$cg/user.slice/user-1000.slice/user@1000.service
	mkdir $svc
	cg_enable $svc
	chown 1000:1000 $svc $svc/cgroup.procs $svc/cgroup.threads $svc/cgroup.subtree_control
	# What the user manager makes inside, done as uid 1000 so that a
	# broken delegation shows here: app.slice, and a scope in it like the
	# one `systemd-run --user --scope` or a desktop terminal gives. Only
	# leaves hold processes (the no-internal-process rule).
	as_user sh -c "mkdir $svc/app.slice && for c in $CONTROLLERS; do echo +\$c >$svc/app.slice/cgroup.subtree_control || exit 1; done && mkdir $svc/app.slice/hutch-test.scope" ||
		die "uid 1000 cannot use its delegated cgroup"
	leaf=$svc/app.slice/hutch-test.scope
	;;
*) die "unknown scenario $SCENARIO" ;;
esac
echo $$ >"$leaf/cgroup.procs" || die "cannot move into $leaf"
echo "init: scenario $SCENARIO, payload cgroup ${leaf#"$cg"}"

if [ "$SCENARIO" = nouserns ]; then
	sysctl -w user.max_user_namespaces=0 || die "sysctl"
fi

cd /home/user/ws || die "no /home/user/ws"
payload_cg=${leaf#"$cg"}
if [ "$INTERACTIVE" = 1 ]; then
	echo "init: interactive shell as uid 1000; exit it to power off"
	setsid -c su -s /bin/sh -c 'exec "$0" "$@"' user -- env -i \
		PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/home/user USER=user LOGNAME=user \
		SHELL=/bin/sh LANG=C.UTF-8 TMPDIR=/tmp HUTCH_VM_SCENARIO="$SCENARIO" HUTCH_VM_CGROUP="$payload_cg" \
		TERM=vt100 /bin/sh -i </dev/ttyS0 >/dev/ttyS0 2>&1
	rc=$?
else
	# A watchdog for a hung guest (seen rarely at a payload's first hutch
	# call, with both CPUs busy and not even the payload's timeout firing):
	# after WATCHDOG_S it has the kernel print the blocked tasks' and every
	# CPU's stacks (sysrq w and l) to the console. It waits with the
	# shell's own read on a FIFO nobody writes (no sleep process for the
	# payload to find, and nothing to fork when the time comes).
	wd_s=$((GUEST_TIMEOUT - 30))
	[ "$wd_s" -gt 120 ] && wd_s=120
	mkfifo /run/hutch-watchdog
	(
		read -r -t "$wd_s" _ <>/run/hutch-watchdog
		echo "init: watchdog: the payload still runs after ${wd_s}s; kernel stacks follow (sysrq w, l)"
		echo w >/proc/sysrq-trigger
		echo l >/proc/sysrq-trigger
	) &
	watchdog=$!
	as_user timeout -s KILL "$GUEST_TIMEOUT" /bin/sh /vm/run </dev/null
	rc=$?
	kill "$watchdog" 2>/dev/null
fi
cd /
echo "init: payload exit status $rc, uptime $(cut -d' ' -f1 /proc/uptime)s"
if [ $rc -eq 0 ]; then
	marker RESULT PASS
else
	marker RESULT "FAIL $rc"
fi
halt_vm
