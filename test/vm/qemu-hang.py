#!/usr/bin/env python3
"""Where is a hung guest? Asks qemu's monitor (a unix socket) for every
vCPU's registers and the top of its stack, and names the kernel functions
they point into with a System.map, when one with symbols is given (the
guest boots with nokaslr, so the addresses match; Debian's linux-image
package ships a placeholder, the real one is in its -dbg package). Without
one it prints the raw addresses. Prints HUTCH-VM-HANG lines for the log.

A guest that froze entirely runs no watchdog of its own; qemu's monitor
still answers, from outside. The stack words that fall in kernel text are a
crude backtrace (callers' return addresses, and some stale values).

Usage: qemu-hang.py [--after SEC --unless MARKER --log LOG] MONITOR_SOCKET [SYSTEM_MAP]
With --after, it first waits SEC seconds and then does nothing if LOG
holds MARKER (the guest reported its result) or the monitor is gone."""
import bisect
import re
import socket
import sys
import time


def load_map(path):
    addrs, names = [], []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[1] in "tTwW":
                    addrs.append(int(parts[0], 16))
                    names.append(parts[2])
    except OSError:
        return None
    if not addrs:
        return None  # Debian's placeholder System.map
    order = sorted(range(len(addrs)), key=addrs.__getitem__)
    return [addrs[i] for i in order], [names[i] for i in order]


def symbolize(sysmap, addr):
    if not sysmap:
        return ""
    addrs, names = sysmap
    i = bisect.bisect_right(addrs, addr) - 1
    if i < 0 or addr - addrs[i] > 1 << 20:
        return ""
    return f"{names[i]}+{addr - addrs[i]:#x}"


class Monitor:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(5)
        self.s.connect(path)
        self.read()  # banner and prompt

    def read(self):
        out, deadline = b"", time.time() + 5
        while not out.endswith(b"(qemu) ") and time.time() < deadline:
            try:
                chunk = self.s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        # The monitor echoes with terminal escapes; keep the text.
        return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", out.decode(errors="replace"))

    def cmd(self, line):
        self.s.sendall(line.encode() + b"\n")
        return self.read()


def main():
    args = sys.argv[1:]
    opts = {}
    while args and args[0] in ("--after", "--unless", "--log") and len(args) > 1:
        opts[args[0]] = args[1]
        args = args[2:]
    if not args:
        sys.exit(__doc__)
    if "--after" in opts:
        time.sleep(float(opts["--after"]))
        try:
            with open(opts.get("--log", "/dev/null"), "rb") as f:
                if opts.get("--unless", "\0").encode() in f.read():
                    return
        except OSError:
            pass
    sysmap = load_map(args[1]) if len(args) > 1 and args[1] else None
    try:
        mon = Monitor(args[0])
    except OSError as e:
        if "--after" not in opts:
            print(f"HUTCH-VM-HANG: no qemu monitor at {args[0]}: {e}")
        return
    cpus = re.findall(r"CPU #(\d+)", mon.cmd("info cpus"))
    print(f"HUTCH-VM-HANG: the guest gave no result; {len(cpus)} vCPUs (kernel symbols: {'yes' if sysmap else 'no System.map'})")
    for cpu in cpus:
        mon.cmd(f"cpu {cpu}")
        regs = mon.cmd("info registers")
        rip = re.search(r"RIP=([0-9a-f]+)", regs)
        rsp = re.search(r"RSP=([0-9a-f]+)", regs)
        hlt = " (halted)" if " HLT=1" in regs else ""
        if not rip:
            print(f"HUTCH-VM-HANG: cpu {cpu}: no registers")
            continue
        r = int(rip.group(1), 16)
        print(f"HUTCH-VM-HANG: cpu {cpu}{hlt}: RIP {r:#x} {symbolize(sysmap, r)}")
        if not rsp:
            continue
        words = re.findall(r"0x([0-9a-f]{16})", mon.cmd(f"x/64gx 0x{rsp.group(1)}").split("\n", 1)[-1])
        if sysmap:
            frames = [f for f in (symbolize(sysmap, int(w, 16)) for w in words) if f]
        else:  # words that look like kernel text addresses
            frames = ["0x" + w for w in words if w.startswith("ffffffff8")]
        if frames:
            print(f"HUTCH-VM-HANG: cpu {cpu}: stack: " + " < ".join(frames[:16]))


if __name__ == "__main__":
    main()
