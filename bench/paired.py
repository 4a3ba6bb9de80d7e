#!/usr/bin/env python3
"""Steady state in paired chunks: the cost of a fork+exec inside a running
sandbox against the host's, with the VM's drift taken out.

usage: paired.py PAIRS K UNIT OUT.json NAME CMD [NAME CMD ...]

Each CMD (a shell-quoted command line; the first is the baseline, the
host) is started once with a worker script appended as its last argument.
The worker reads a line, runs K iterations of UNIT (a shell command line,
e.g. /bin/true), and answers with the microseconds they took by its own
clock (date +%s%N on each side, so the start of the sandbox and the pipe
round trip are not in it), or "fail" if UNIT failed. The workers take
turns, one chunk each, PAIRS times plus 5 warm-up chunks, the order
reversed every other round. A chunk of 100 /bin/true lasts ~70 ms here, so
two chunks that are compared ran within a fraction of a second of each
other: this VM's speed drifts by +-20% over seconds, which separate
invocations (one loop on the host, then one in the sandbox) turn into
noise of the same size.

OUT.json: {"k": K, "unit": UNIT, "pairs": PAIRS, "chunks": {NAME: [us, ...]}}.
"""
import json
import shlex
import subprocess
import sys

WARMUP = 5


def worker_script(k, unit):
    return ('while read go; do s=$(date +%%s%%N); i=0; while [ $i -lt %d ]; do %s || { echo fail; exit 1; }; '
            'i=$((i+1)); done; e=$(date +%%s%%N); echo $(( (e-s)/1000 )); done' % (k, unit))


def main():
    if len(sys.argv) < 7 or len(sys.argv) % 2 != 1:
        sys.exit("usage: paired.py PAIRS K UNIT OUT.json NAME CMD [NAME CMD ...]")
    pairs, k, unit, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    names, cmds = sys.argv[5::2], sys.argv[6::2]
    script = worker_script(k, unit)
    procs = [subprocess.Popen(shlex.split(c) + [script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, bufsize=1) for c in cmds]
    chunks = {n: [] for n in names}
    try:
        for rnd in range(WARMUP + pairs):
            order = list(range(len(procs)))
            if rnd % 2:
                order.reverse()
            for j in order:
                procs[j].stdin.write("go\n")
                procs[j].stdin.flush()
                line = procs[j].stdout.readline()
                if not line.strip().isdigit():
                    sys.exit(f"paired.py: worker {names[j]} ({cmds[j]}) answered {line!r}")
                if rnd >= WARMUP:
                    chunks[names[j]].append(int(line))
    finally:
        for p in procs:
            try:
                p.stdin.close()
            except OSError:
                pass
            p.wait()
    with open(out, "w") as f:
        json.dump({"k": k, "unit": unit, "pairs": pairs, "chunks": chunks}, f)


if __name__ == "__main__":
    main()
