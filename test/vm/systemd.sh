#!/usr/bin/env bash
# hutch's VM test tier, systemd scenario: boot the pinned Debian cloud
# kernel under qemu TCG into a minimal Debian bookworm system with systemd
# as pid 1, a systemd user manager for uid 1000 (lingering) and its D-Bus
# session bus, and run hutch there as uid 1000 from a *system* service, so
# that hutch sits in a root-owned cgroup with nothing delegated: the only
# cgroup hutch can get is a transient scope from the user manager
# (Delegate=yes), asked for over D-Bus. See docs/TESTING.md.
#
# usage: test/vm/systemd.sh [--verbose] [--keep] [--timeout SEC]
#        (HUTCH_VM_APPEND adds kernel command line words, e.g. loglevel=7;
#        hutch.testhang=1 makes the payload of the first attempt hang, to
#        check vm_test.go's retry; HUTCH_VM_ATTEMPT=N numbers the attempt)
#
# The kernel, busybox and qemu come from run.sh (--fetch-only: pinned by
# sha256). The root filesystem is made with debootstrap from Debian's
# bookworm archive (cached in test/vm/cache/rootfs-systemd, keyed by the
# package list below) and packed, with hutch and the payload, into an ext4
# image that qemu opens read-only (snapshot=on). Exits 0 on PASS (or SKIP
# when qemu or debootstrap cannot be had), 1 on FAIL, 2 on a usage error.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=$here/cache
SUITE=bookworm
MIRROR=${HUTCH_VM_MIRROR:-http://deb.debian.org/debian}
INCLUDE=systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,procps
# Loaded in this order by the initramfs to reach the root disk.
DISK_MODULES="virtio virtio_ring virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk"

timeout_s=420
verbose=0
keep=0
while [ $# -gt 0 ]; do
	case "$1" in
	--timeout) timeout_s=${2:?}; shift 2 ;;
	-v | --verbose) verbose=1; shift ;;
	--keep) keep=1; shift ;;
	-h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
	*) echo "systemd.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

say() { echo "systemd.sh: $*" >&2; }
fail() { echo "systemd.sh: FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: hutch VM tier (systemd) not run: $*"; exit 0; }
now() { echo "${EPOCHREALTIME/,/.}"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
t_start=$(now)

hutch=${HUTCH_BIN:-$repo/bin/hutch}
[ -x "$hutch" ] || fail "no hutch binary at $hutch: run make build, or set HUTCH_BIN"

# qemu, the pinned kernel and busybox.
fetched=$("$here/run.sh" --fetch-only) || exit 1
case "$fetched" in SKIP:*) echo "$fetched"; exit 0 ;; esac
kdeb=$(ls "$cache"/debs/linux-image-*.deb | head -n 1)
bdir=$(ls -d "$cache"/busybox-*/ | head -n 1)
busybox=${bdir%/}/bin/busybox
qemu_bin=$(command -v qemu-system-x86_64)
qboot=/usr/share/qemu/qboot.rom

# ---- the root file system (debootstrap, cached) ----
key="$SUITE $INCLUDE"
rootfs=$cache/rootfs-systemd
exec 9>"$cache/.lock-systemd"
flock 9
if [ "$(cat "$rootfs.done" 2>/dev/null)" != "$key" ]; then
	[ "$(id -u)" = 0 ] || skip "building the Debian root file system needs root (debootstrap)"
	if ! command -v debootstrap >/dev/null; then
		say "installing debootstrap"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
			skip "apt-get install debootstrap failed"
	fi
	rm -rf "$rootfs" "$rootfs.done"
	say "debootstrap $SUITE (minbase + $INCLUDE) from $MIRROR"
	if ! debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$rootfs" "$MIRROR" >"$cache/debootstrap.log" 2>&1; then
		tail -n 20 "$cache/debootstrap.log" >&2
		umount -R "$rootfs/proc" "$rootfs/sys" 2>/dev/null || true
		fail "debootstrap failed (log: $cache/debootstrap.log)"
	fi
	echo "$key" >"$rootfs.done"
fi
flock -u 9

build=$(mktemp -d "$cache/tmp/systemd.XXXXXX")
qpid=
cleanup() {
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then kill -KILL "$qpid" 2>/dev/null || true; fi
	if [ -n "$hangpid" ]; then kill "$hangpid" 2>/dev/null || true; fi
	if [ $keep = 0 ]; then rm -rf "$build"; else say "kept $build"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---- the image: the cached rootfs plus hutch, a user and the payload ----
nonce=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
hangpid=
img=$build/root
mkdir -p "$img"
cp -a "$rootfs/." "$img/"
install -m 755 "$hutch" "$img/usr/local/bin/hutch"
install -m 755 "$here/systemd-payload.sh" "$img/usr/local/bin/hutch-vm-payload"
echo "hutch-vm" >"$img/etc/hostname"
cat >>"$img/etc/passwd" <<EOF
user:x:1000:1000:hutch test user:/home/user:/bin/sh
EOF
cat >>"$img/etc/group" <<EOF
user:x:1000:
EOF
echo "user:*:19000:0:99999:7:::" >>"$img/etc/shadow"
mkdir -p "$img/home/user/ws" "$img/var/lib/systemd/linger"
chown -R 1000:1000 "$img/home/user"
touch "$img/var/lib/systemd/linger/user" # user@1000.service starts at boot
# The payload runs once the user manager is up, then powers the VM off.
cat >"$img/etc/systemd/system/hutch-vm-test.service" <<EOF
[Unit]
Description=hutch VM test payload
After=multi-user.target user@1000.service
Wants=user@1000.service

[Service]
Type=oneshot
Environment=HUTCH_VM_NONCE=$nonce
ExecStart=/usr/local/bin/hutch-vm-payload
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
ExecStopPost=/bin/systemctl poweroff --no-block --force
EOF
chmod 600 "$img/etc/systemd/system/hutch-vm-test.service"
mkdir -p "$img/etc/systemd/system/multi-user.target.wants"
ln -sf ../hutch-vm-test.service "$img/etc/systemd/system/multi-user.target.wants/hutch-vm-test.service"
# Quiet, quick boot: no getty on the console, no network waits.
ln -sf /dev/null "$img/etc/systemd/system/serial-getty@ttyS0.service"
ln -sf /dev/null "$img/etc/systemd/system/getty@tty1.service"
ln -sf /dev/null "$img/etc/systemd/system/systemd-timesyncd.service"
printf 'LABEL=root / ext4 rw 0 0\n' >"$img/etc/fstab"
mkfs.ext4 -q -L root -d "$img" "$build/root.img" 1200M || fail "mkfs.ext4 -d failed"
rm -rf "$img"

# ---- initramfs: busybox, the disk modules, mount and switch_root ----
ird=$build/initrd
mkdir -p "$ird"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$busybox" "$ird/bin/busybox"
for a in sh mount insmod switch_root sleep mkdir cat echo; do ln -s busybox "$ird/bin/$a"; done
kx=$build/kernel
dpkg-deb -x "$kdeb" "$kx"
for m in $DISK_MODULES; do
	ko=$(find "$kx/lib/modules" -name "$m.ko" | head -n 1)
	[ -n "$ko" ] || fail "module $m not in $(basename "$kdeb")"
	cp "$ko" "$ird/lib/modules/"
done
rm -rf "$kx"
cat >"$ird/init" <<EOF
#!/bin/sh
mount -t devtmpfs devtmpfs /dev
exec 0</dev/console 1>/dev/console 2>&1
mount -t proc proc /proc
for m in $DISK_MODULES; do insmod /lib/modules/\$m.ko || echo "initrd: insmod \$m failed"; done
i=0
while [ ! -b /dev/vda ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done
mount -t ext4 -o ro /dev/vda /newroot || { echo "HUTCH-VM-RESULT $nonce: FAIL no root disk"; exec sh; }
umount /proc
mount --move /dev /newroot/dev
exec switch_root /newroot /lib/systemd/systemd
EOF
chmod 755 "$ird/init"
(cd "$ird" && find . | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) >"$build/initrd.cpio"

# ---- boot ----
# One boot. A boot that gives no result at all is retried by the Go test
# (vm_test.go), as for every scenario; HUTCH_VM_ATTEMPT numbers it for the
# guest (hutch.attempt=N, which hutch.testhang=1 looks at).
log=$cache/logs/systemd.log
mkdir -p "$(dirname "$log")"
vmlinuz=$(ls "$cache"/kernel-*/vmlinuz-* | head -n 1)
attempt=${HUTCH_VM_ATTEMPT:-1}
: >"$log"
say "booting systemd (Debian $SUITE) on $(basename "$vmlinuz"), log $log (attempt $attempt)"
t_boot=$(now)
setpriv --pdeathsig KILL timeout -k 5 "$timeout_s" setpriv --pdeathsig KILL \
	"$qemu_bin" -accel tcg -m 1536 -smp 2 \
	-nodefaults -no-user-config -nographic -serial stdio -monitor "unix:$build/monitor.sock,server=on,wait=off" \
	-no-reboot -bios "$qboot" -kernel "$vmlinuz" -initrd "$build/initrd.cpio" \
	-drive file="$build/root.img",if=virtio,format=raw,snapshot=on \
	-append "console=ttyS0 panic=-1 quiet systemd.show_status=0 rw nokaslr hutch.attempt=$attempt ${HUTCH_VM_APPEND:-}" \
	</dev/null >>"$log" 2>&1 &
qpid=$!
# A guest that froze runs no watchdog of its own: shortly before the
# timeout, ask qemu's monitor where its vCPUs are (qemu-hang.py).
python3 "$here/qemu-hang.py" --after $((timeout_s > 40 ? timeout_s - 15 : timeout_s * 2 / 3)) \
	--unless "HUTCH-VM-RESULT $nonce:" --log "$log" \
	"$build/monitor.sock" "$(ls "$cache"/kernel-*/System.map-* 2>/dev/null | head -n 1)" >>"$log" 2>&1 &
hangpid=$!
if [ $verbose = 1 ]; then tail -n +1 -f --pid=$qpid "$log" | tr -d '\r' >&2 & fi
rc=0
wait $qpid || rc=$?
qpid=
kill $hangpid 2>/dev/null || true
t_end=$(now)
result=$(grep -a "HUTCH-VM-RESULT $nonce:" "$log" | tr -d '\r' | head -n 1 | sed 's/.*: //' || true)
echo "HUTCH-VM-TIMING: scenario=systemd attempt=$attempt qemu=$(secs "$t_boot" "$t_end")s total=$(secs "$t_start" "$t_end")s"
if [ "$result" = PASS ]; then
	echo "HUTCH-VM-RESULT: PASS (scenario systemd)"
	exit 0
fi
{
	echo "---- last 80 lines of $log ----"
	tail -n 80 "$log" | tr -d '\r'
	echo "----"
} >&2
if [ $rc = 124 ] || [ $rc = 137 ]; then
	echo "HUTCH-VM-RESULT: FAIL (scenario systemd): qemu timed out after ${timeout_s}s"
else
	echo "HUTCH-VM-RESULT: FAIL (scenario systemd): ${result:-no result marker (qemu exit status $rc)}"
fi
exit 1
