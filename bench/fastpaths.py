#!/usr/bin/env python3
"""What each of hutch's speed-only code paths saves on a realistic call.

Every path that exists only to save time must save more than 5% of a
realistic call, or be folded back into the one path (docs/PERFORMANCE.md,
"Second paths"). This measures each with the path on and off, interleaved
(one call of each variant in turn, the order shuffled every round), so that
the machine's slow phases fall on both alike, and prints the medians and
the saving as a share of the call.

  python3 bench/fastpaths.py OUT.json ROUNDS MODE...

MODE is one of:
  proc NAME -- VARIANT...   time a command line, each VARIANT being
                            LABEL=ENV[,ENV]:ARGV (ARGV split on spaces; ENV
                            may be empty)
  mcp NAME CMD BIN_A BIN_B  time run_command CMD through `BIN mcp`, a server
                            of each binary, CALLS calls per round each

Run it as the user the numbers are for (bench/run.sh runs it as nobody).
"""
import json
import os
import random
import statistics
import subprocess
import sys
import time


def proc_round(variants, samples):
    order = list(variants)
    random.shuffle(order)
    for label, env, argv in order:
        e = dict(os.environ)
        e.update(env)
        t0 = time.perf_counter_ns()
        r = subprocess.run(argv, env=e, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dt = time.perf_counter_ns() - t0
        if r.returncode != 0:
            raise SystemExit(f"{label}: {' '.join(argv)} exited {r.returncode}")
        samples[label].append(dt / 1e6)


class MCP:
    def __init__(self, binary):
        self.p = subprocess.Popen([binary, "mcp", "--no-discover"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, bufsize=0)
        self.id = 0
        self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
        self.p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    def call(self, method, params):
        self.id += 1
        msg = json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}) + "\n"
        self.p.stdin.write(msg.encode())
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise SystemExit("the MCP server ended")
            m = json.loads(line)
            if m.get("id") == self.id:
                return m

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def mcp_round(servers, cmd, calls, samples):
    order = list(servers.items())
    random.shuffle(order)
    args = {"name": "run_command", "arguments": {"command": cmd}}
    for label, srv in order:
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            r = srv.call("tools/call", args)
            if r.get("result", {}).get("isError"):
                raise SystemExit(f"{label}: run_command {cmd}: {r}")
        samples[label].append((time.perf_counter_ns() - t0) / calls / 1e6)


def main():
    out, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    results = {}
    i = 0
    while i < len(modes):
        kind, name = modes[i], modes[i + 1]
        if kind == "proc":
            assert modes[i + 2] == "--"
            j = i + 3
            variants = []
            while j < len(modes) and modes[j] not in ("proc", "mcp"):
                label, spec = modes[j].split("=", 1)
                envs, argv = spec.split(":", 1)
                env = dict(kv.split("~", 1) for kv in envs.split(",") if kv)
                variants.append((label, env, argv.split()))
                j += 1
            samples = {v[0]: [] for v in variants}
            for _ in range(3):
                proc_round(variants, {v[0]: [] for v in variants})  # warm caches and the plan hint
            for _ in range(rounds):
                proc_round(variants, samples)
            i = j
        else:
            cmd, a, b = modes[i + 2], modes[i + 3], modes[i + 4]
            servers = {"A": MCP(a), "B": MCP(b)}
            samples = {"A": [], "B": []}
            mcp_round(servers, cmd, 20, {"A": [], "B": []})
            for _ in range(rounds):
                mcp_round(servers, cmd, 20, samples)
            for s in servers.values():
                s.close()
            i += 5
        med = {k: statistics.median(v) for k, v in samples.items()}
        results[name] = {"median_ms": med, "rounds": rounds}
        labels = list(med)
        base = labels[0]
        line = f"{name}: " + ", ".join(f"{k} {med[k]:.3f} ms" for k in labels)
        for k in labels[1:]:
            line += f"; {base} saves {(med[k] - med[base]) / med[k] * 100:.1f}% of {k}"
        print(line, flush=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
