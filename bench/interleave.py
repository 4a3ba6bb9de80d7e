#!/usr/bin/env python3
"""Interleaved A/B timing: runs each command once per round, in turn, for
RUNS rounds (after WARMUP rounds), and writes hyperfine-shaped JSON (median,
min, times in seconds). Unlike one hyperfine invocation, which times all
runs of one command before the next, interleaving spreads this machine's
drift (other jobs, frequency, the host's own noise) evenly over the
commands, so the ratio of medians is steadier.

Usage: interleave.py RUNS WARMUP OUT.json NAME CMD [NAME CMD ...]
A CMD is split like a shell would (shlex); the environment is inherited.
stdout and stderr of the commands go to /dev/null; a failing run is an
error."""
import json
import os
import shlex
import statistics
import sys
import time


def main():
    runs, warmup, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    args = sys.argv[4:]
    if len(args) < 2 or len(args) % 2:
        sys.exit("interleave.py: want NAME CMD pairs")
    cmds = [(args[i], shlex.split(args[i + 1])) for i in range(0, len(args), 2)]
    null = os.open(os.devnull, os.O_RDWR)
    acts = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)]
    times = {name: [] for name, _ in cmds}
    for i in range(warmup + runs):
        for name, argv in cmds:
            t0 = time.perf_counter()
            pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=acts)
            _, status = os.waitpid(pid, 0)
            t = time.perf_counter() - t0
            if status != 0:
                sys.exit(f"interleave.py: {name}: {argv} failed (wait status {status})")
            if i >= warmup:
                times[name].append(t)
    res = [{"command": name, "median": statistics.median(ts), "min": min(ts), "mean": statistics.mean(ts),
            "user": 0.0, "system": 0.0, "times": ts} for name, ts in times.items()]
    with open(out, "w") as f:
        json.dump({"results": res}, f)


if __name__ == "__main__":
    main()
