#!/usr/bin/env bash
# hutch's VM test tier: boot a real cgroup v2 host (Debian's cloud kernel,
# pinned below) under qemu TCG with a busybox initramfs, run a payload there
# as uid 1000, and report its result. See docs/TESTING.md.
#
# usage: test/vm/run.sh [OPTIONS] [FILE[:DEST]...] [-- COMMAND [ARG...]]
#
#   FILE[:DEST]        copy FILE into the VM at DEST (default /BASENAME), mode
#                      kept. Without any FILE: $HUTCH_BIN (default bin/hutch)
#                      as /hutch and test/vm/smoke.sh as /smoke.sh.
#   COMMAND            run in the VM as uid 1000, from /home/user/ws, with
#                      HUTCH_VM_SCENARIO and HUTCH_VM_CGROUP set. Default:
#                      /bin/sh /smoke.sh. Exit status 0 is a pass.
#   --scenario NAME    delegated (default): cgroup v2 with user@1000.service
#                        delegated to uid 1000, as systemd's Delegate=yes;
#                      nodelegation: cgroup v2, the payload in a root-owned
#                        session scope, nothing delegated;
#                      nouserns: as delegated, with user.max_user_namespaces=0.
#   --timeout SEC      hard limit on the qemu run (default 300)
#   --log FILE         console log (default test/vm/cache/logs/SCENARIO.log)
#   --append ARGS      extra kernel command line words (e.g. "lsm=yama");
#                      -WORD drops WORD (e.g. "-quiet")
#   --verbose, -v      stream the console while it runs
#   --keep             keep the build directory (initramfs, /vm files)
#   --shell            debug: instead of the payload, an interactive shell as
#                      uid 1000 on this terminal (exit it to power off; the
#                      FILEs are there); qemu's Ctrl-A X also ends the VM
#   --fetch-only       install qemu, fetch and check the pinned packages, exit
#
# Exits 0 when the payload passed (or, printing a "SKIP:" line, when qemu
# cannot be installed or run here), 1 when it failed, 2 on a usage error.
# Installing qemu needs root (apt-get); the packages are downloaded once into
# test/vm/cache/ (never committed) and checked against the pinned sha256.
set -euo pipefail

# ---- pinned packages: name, version, sha256 of the .deb ----
# Update: apt-get update && apt-cache show PACKAGE | grep -E '^(Version|SHA256)'
# (prefer the version in bookworm/main: the security archive keeps only the
# newest build, so its versions vanish quickly).
KERNEL_PKG=linux-image-6.1.0-50-cloud-amd64
KERNEL_VER=6.1.176-1
KERNEL_SHA256=efe19f605b6f54a8352e68d85a629abb2d30b72a085faef603a9152590baa791
BUSYBOX_PKG="busybox-static"
BUSYBOX_VER=1:1.35.0-4+deb12u1+b1
BUSYBOX_SHA256=3d3fdbe91d4660c873e14b092c213fe81c1da6362daa236eb25d0171eb108744
# Kernel modules hutch may need that the cloud kernel does not build in.
MODULES="overlay veth tun"
# Controllers enabled down to the payload's parent, as systemd does.
CONTROLLERS="memory pids cpu"
QEMU_PKGS="qemu-system-x86 qemu-system-data"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=$here/cache

scenario=delegated
timeout_s=300
log=
append=
verbose=0
keep=0
fetch_only=0
shell=0
files=()
cmd=()
while [ $# -gt 0 ]; do
	case "$1" in
	--scenario) scenario=${2:?--scenario needs a NAME}; shift 2 ;;
	--scenario=*) scenario=${1#*=}; shift ;;
	--timeout) timeout_s=${2:?}; shift 2 ;;
	--timeout=*) timeout_s=${1#*=}; shift ;;
	--log) log=${2:?}; shift 2 ;;
	--log=*) log=${1#*=}; shift ;;
	--append) append=${2?}; shift 2 ;;
	--append=*) append=${1#*=}; shift ;;
	-v | --verbose) verbose=1; shift ;;
	--keep) keep=1; shift ;;
	--shell) shell=1; shift ;;
	--fetch-only) fetch_only=1; shift ;;
	-h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
	--) shift; cmd=("$@"); break ;;
	-*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
	*) files+=("$1"); shift ;;
	esac
done
case "$scenario" in
delegated | nodelegation | nouserns) ;;
*) echo "run.sh: unknown scenario '$scenario' (delegated, nodelegation, nouserns)" >&2; exit 2 ;;
esac
[[ "$timeout_s" =~ ^[0-9]+$ ]] && [ "$timeout_s" -ge 30 ] || { echo "run.sh: --timeout wants seconds >= 30" >&2; exit 2; }

say() { echo "run.sh: $*" >&2; }
fail() { echo "run.sh: FAIL: $*" >&2; exit 1; }
skip() {
	{
		echo "################################################################"
		echo "SKIP: hutch VM tier not run: $*"
		echo "################################################################"
	} >&2
	echo "SKIP: $*"
	exit 0
}
now() { echo "${EPOCHREALTIME/,/.}"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

t_start=$(now)
mkdir -p "$cache"

# ---- host tools ----
[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || skip "needs an x86_64 Linux host (this is $(uname -s)/$(uname -m))"
qemu_bin=$(command -v qemu-system-x86_64 || true)
qboot=/usr/share/qemu/qboot.rom
if [ -z "$qemu_bin" ] || [ ! -f "$qboot" ]; then
	if [ "$(id -u)" != 0 ]; then
		skip "qemu-system-x86_64 or $qboot is missing and installing it needs root: sudo apt-get install --no-install-recommends $QEMU_PKGS"
	fi
	command -v apt-get >/dev/null || skip "qemu-system-x86_64 is missing and there is no apt-get to install it"
	say "installing $QEMU_PKGS"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -qq --no-install-recommends $QEMU_PKGS >"$cache/apt.log" 2>&1; then
		apt-get update -qq >>"$cache/apt.log" 2>&1 || true
		apt-get install -y -qq --no-install-recommends $QEMU_PKGS >>"$cache/apt.log" 2>&1 ||
			skip "apt-get install $QEMU_PKGS failed: $(tail -n 3 "$cache/apt.log" | tr '\n' ' ')"
	fi
	rm -f "$cache/apt.log"
	qemu_bin=$(command -v qemu-system-x86_64) || skip "qemu-system-x86_64 still missing after apt-get install"
	[ -f "$qboot" ] || skip "$qboot still missing after apt-get install"
fi
for tool in timeout setpriv dpkg-deb sha256sum awk; do
	command -v $tool >/dev/null || fail "$tool is missing on the host"
done

# ---- pinned packages, fetched once into the cache ----
mkdir -p "$cache/debs" "$cache/logs" "$cache/tmp"
# Left behind by runs that were killed (SIGKILL skips the EXIT trap).
find "$cache/tmp" -mindepth 1 -maxdepth 1 -mmin +120 -exec rm -rf {} + 2>/dev/null || true
# fetch PKG VERSION SHA256: the checked .deb's path on stdout.
fetch() {
	local pkg=$1 ver=$2 sum=$3 deb got dl
	deb=$cache/debs/${pkg}_${ver#*:}_amd64.deb
	if [ -f "$deb" ] && [ "$(sha256sum <"$deb" | cut -d' ' -f1)" = "$sum" ]; then
		echo "$deb"
		return
	fi
	command -v apt-get >/dev/null || fail "no apt-get to download $pkg=$ver; put the .deb at $deb"
	dl=$(mktemp -d "$cache/tmp/dl.XXXXXX")
	chmod 755 "$dl" # apt's _apt user downloads into it when it can
	say "downloading $pkg=$ver"
	if ! (cd "$dl" && apt-get download -q "$pkg=$ver") >"$dl/log" 2>&1; then
		# Maybe stale package lists: refresh them once, if we may.
		[ "$(id -u)" != 0 ] || apt-get update -qq >/dev/null 2>&1 || true
		if ! (cd "$dl" && apt-get download -q "$pkg=$ver") >"$dl/log" 2>&1; then
			cat "$dl/log" >&2
			rm -rf "$dl"
			fail "cannot download the pinned $pkg=$ver (dropped from the mirror?): pin a current build in test/vm/run.sh, as docs/TESTING.md (Bumping a pin) says"
		fi
	fi
	got=$(sha256sum "$dl"/*.deb | cut -d' ' -f1)
	if [ "$got" != "$sum" ]; then
		rm -rf "$dl"
		{
			echo "################################################################"
			echo "run.sh: FAIL: sha256 mismatch for $pkg=$ver"
			echo "  pinned:     $sum"
			echo "  downloaded: $got"
			echo "  Not using it. If Debian rebuilt the package, check and re-pin."
			echo "################################################################"
		} >&2
		exit 1
	fi
	mv "$dl"/*.deb "$deb"
	rm -rf "$dl"
	echo "$deb"
}

exec 9>"$cache/.lock"
flock 9
kernel_deb=$(fetch $KERNEL_PKG $KERNEL_VER $KERNEL_SHA256)
busybox_deb=$(fetch $BUSYBOX_PKG $BUSYBOX_VER $BUSYBOX_SHA256)
# Of the kernel package, keep vmlinuz, its config, its System.map (which
# qemu-hang.py names a hung guest's functions with) and the modules we load,
# decompressed (the cloud kernel ships them plain; others use .ko.xz/.ko.zst).
kdir=$cache/kernel-$KERNEL_VER
if [ "$(cat "$kdir/.done" 2>/dev/null)" != "$MODULES System.map" ]; then
	rm -rf "$kdir" "$kdir.x"
	dpkg-deb -x "$kernel_deb" "$kdir.x"
	mkdir -p "$kdir/modules"
	cp "$kdir.x"/boot/vmlinuz-* "$kdir.x"/boot/config-* "$kdir.x"/boot/System.map-* "$kdir/"
	for m in $MODULES; do
		ko=$(find "$kdir.x/lib/modules" \( -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" -o -name "$m.ko.gz" \) | head -n 1)
		[ -n "$ko" ] || fail "module $m not found in $KERNEL_PKG"
		case "$ko" in
		*.xz) xz -dc "$ko" ;;
		*.zst) zstd -qdc "$ko" ;;
		*.gz) gzip -dc "$ko" ;;
		*) cat "$ko" ;;
		esac >"$kdir/modules/$m.ko" || fail "cannot decompress $ko"
		deps=$(tr '\0' '\n' <"$kdir/modules/$m.ko" | sed -n 's/^depends=//p' | head -n 1 || true)
		[ -z "$deps" ] || fail "module $m depends on $deps: add those to MODULES, in load order"
	done
	rm -rf "$kdir.x"
	echo "$MODULES System.map" >"$kdir/.done"
fi
bdir=$cache/busybox-${BUSYBOX_VER#*:}
if [ ! -f "$bdir/.done" ]; then
	rm -rf "$bdir"
	dpkg-deb -x "$busybox_deb" "$bdir"
	touch "$bdir/.done"
fi
flock -u 9
vmlinuz=$(echo "$kdir"/vmlinuz-*)
kver=${vmlinuz##*/vmlinuz-}
busybox=$bdir/bin/busybox
[ -f "$vmlinuz" ] && [ -x "$busybox" ] || fail "unexpected package layout in $kdir or $bdir"
if [ $fetch_only = 1 ]; then
	echo "kernel $KERNEL_PKG $KERNEL_VER ($kver) sha256 $KERNEL_SHA256"
	echo "busybox $BUSYBOX_PKG $BUSYBOX_VER sha256 $BUSYBOX_SHA256"
	exit 0
fi

# ---- payload defaults ----
if [ ${#files[@]} -eq 0 ]; then
	hutch=${HUTCH_BIN:-$repo/bin/hutch}
	[ -x "$hutch" ] || fail "no hutch binary at $hutch: run make build, or set HUTCH_BIN"
	files=("$hutch:/hutch" "$here/smoke.sh:/smoke.sh")
fi
[ ${#cmd[@]} -gt 0 ] || cmd=(/bin/sh /smoke.sh)
[ $shell = 0 ] || cmd=(/bin/sh -i)

# ---- initramfs ----
build=$(mktemp -d "$cache/tmp/build.XXXXXX")
root=$build/root
qpid=
cleanup() {
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
		kill -TERM "$qpid" 2>/dev/null || true
		sleep 1
		kill -KILL "$qpid" 2>/dev/null || true
	fi
	if [ "$keep" = 0 ]; then rm -rf "$build"; else say "kept $build"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

mkdir -p "$root"/{usr/bin,usr/sbin,etc,lib/modules,vm,newroot,dev,proc,sys,tmp,run,root,home}
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
cp "$busybox" "$root/usr/bin/busybox"
for applet in $("$busybox" --list-full); do
	case "$applet" in
	bin/* | usr/bin/*) dst=usr/bin/${applet##*/} ;;
	sbin/* | usr/sbin/*) dst=usr/sbin/${applet##*/} ;;
	*) continue ;;
	esac
	[ -e "$root/$dst" ] || ln -s /usr/bin/busybox "$root/$dst"
done
install -m 755 "$here/init.sh" "$root/init"
cp "$kdir"/modules/*.ko "$root/lib/modules/"
for f in "${files[@]}"; do
	src=${f%%:*}
	dst=/${src##*/}
	[ "$src" = "$f" ] || dst=${f#*:}
	[ -f "$src" ] || fail "no such file: $src"
	case "$dst" in /*) ;; *) dst=/$dst ;; esac
	mkdir -p "$root$(dirname "$dst")"
	cp "$src" "$root$dst"
	chmod a+rX "$root$dst"
done
nonce=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
guest_timeout=$((timeout_s - 20))
cat >"$root/vm/config" <<EOF
SCENARIO=$scenario
NONCE=$nonce
GUEST_TIMEOUT=$guest_timeout
INTERACTIVE=$shell
CONTROLLERS="$CONTROLLERS"
MODULES="$MODULES"
EOF
chmod 600 "$root/vm/config"
q() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
{
	printf '# the payload, run by /init as uid 1000\nexec'
	for a in "${cmd[@]}"; do printf ' %s' "$(q "$a")"; done
	printf '\n'
} >"$root/vm/run"
chmod 644 "$root/vm/run"
(cd "$root" && find . -mindepth 1 | sed 's|^\./||' | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) >"$build/initrd.cpio" ||
	fail "cannot build the initramfs"

# ---- boot ----
log=${log:-$cache/logs/$scenario.log}
mkdir -p "$(dirname "$log")"
: >"$log"
# nokaslr: the addresses qemu-hang.py reports of a hung guest then match
# the kernel's symbols.
cmdline="console=ttyS0 panic=-1 quiet nokaslr"
for a in $append; do
	case "$a" in
	-[!-]*) cmdline=$(echo " $cmdline " | sed "s| ${a#-} | |;s|^ ||;s| $||") ;;
	*) cmdline="$cmdline $a" ;;
	esac
done
say "booting $KERNEL_PKG $KERNEL_VER, scenario $scenario, initramfs $(($(stat -c %s "$build/initrd.cpio") / 1024)) KiB, log $log"
t_boot=$(now)
if [ $shell = 1 ]; then
	[ -t 0 ] || fail "--shell wants a terminal on stdin"
	timeout --foreground "$timeout_s" "$qemu_bin" -accel tcg -m 1024 -smp 2 \
		-nodefaults -no-user-config -nographic -serial mon:stdio \
		-no-reboot -bios "$qboot" -kernel "$vmlinuz" -initrd "$build/initrd.cpio" \
		-append "$cmdline" || true
	exit 0
fi
# Two guards against a stray qemu: timeout(1) ends it after --timeout, and a
# parent-death signal at each level ends it when this script dies (timeout
# runs the command in a process group of its own, out of reach of a kill of
# ours). The EXIT trap covers a normal exit.
setpriv --pdeathsig KILL \
	timeout -k 5 "$timeout_s" \
	setpriv --pdeathsig KILL \
	"$qemu_bin" -accel tcg -m 1024 -smp 2 \
	-nodefaults -no-user-config -nographic -serial stdio \
	-monitor "unix:$build/monitor.sock,server=on,wait=off" \
	-no-reboot -bios "$qboot" \
	-kernel "$vmlinuz" -initrd "$build/initrd.cpio" \
	-append "$cmdline" \
	</dev/null >>"$log" 2>&1 &
qpid=$!
booted_at=$SECONDS
tail_pid=
if [ $verbose = 1 ]; then
	tail -n +1 -f --pid=$qpid "$log" | tr -d '\r' >&2 &
	tail_pid=$!
fi
t_booted=
t_result=
asked=0
while kill -0 $qpid 2>/dev/null; do
	if [ -z "$t_booted" ] && grep -aq "HUTCH-VM-BOOTED $nonce:" "$log"; then t_booted=$(now); fi
	if [ -z "$t_result" ] && grep -aq "HUTCH-VM-RESULT $nonce:" "$log"; then t_result=$(now); fi
	# No result shortly before the timeout: a guest that froze runs no
	# watchdog of its own (/init's), so ask qemu's monitor where its vCPUs
	# are, once.
	if [ $asked = 0 ] && [ -z "$t_result" ] && [ $((SECONDS - booted_at)) -ge $((timeout_s - 10)) ]; then
		asked=1
		python3 "$here/qemu-hang.py" "$build/monitor.sock" "$(ls "$kdir"/System.map-* 2>/dev/null | head -n 1)" >>"$log" 2>&1 || true
	fi
	sleep 0.1
done
rc=0
wait $qpid || rc=$?
qpid=
t_end=$(now)
[ -z "$tail_pid" ] || wait $tail_pid 2>/dev/null || true
[ -n "$t_booted" ] || ! grep -aq "HUTCH-VM-BOOTED $nonce:" "$log" || t_booted=$t_end
[ -n "$t_result" ] || ! grep -aq "HUTCH-VM-RESULT $nonce:" "$log" || t_result=$t_end

result=$(grep -a "HUTCH-VM-RESULT $nonce:" "$log" | tr -d '\r' | head -n 1 | sed 's/.*: //' || true)
guest_boot=$(grep -a "HUTCH-VM-BOOTED $nonce:" "$log" | tr -d '\r' | sed -n 's/.*uptime \([0-9.]*\)s.*/\1/p' | head -n 1 || true)
timing="boot=$([ -n "$t_booted" ] && secs "$t_boot" "$t_booted" || echo -)s"
timing+=" guest_boot=${guest_boot:--}s"
timing+=" payload=$([ -n "$t_booted" ] && [ -n "$t_result" ] && secs "$t_booted" "$t_result" || echo -)s"
timing+=" qemu=$(secs "$t_boot" "$t_end")s total=$(secs "$t_start" "$t_end")s"
echo "HUTCH-VM-TIMING: scenario=$scenario $timing"

if [ "$result" = PASS ]; then
	echo "HUTCH-VM-RESULT: PASS (scenario $scenario)"
	exit 0
fi
{
	echo "---- last 60 lines of $log ----"
	tail -n 60 "$log" | tr -d '\r'
	echo "----"
} >&2
if [ $rc = 124 ] || [ $rc = 137 ]; then
	echo "HUTCH-VM-RESULT: FAIL (scenario $scenario): qemu timed out after ${timeout_s}s"
elif [ -z "$result" ]; then
	echo "HUTCH-VM-RESULT: FAIL (scenario $scenario): no result marker (qemu exit status $rc)"
else
	echo "HUTCH-VM-RESULT: FAIL (scenario $scenario): payload $result"
fi
exit 1
