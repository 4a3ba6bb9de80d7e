#!/usr/bin/env python3
"""Summarize bench/run.sh's results: medians, spread, ratios from the same
hyperfine invocation, and pass/fail against the targets of issue 6
(docs/PERFORMANCE.md). Usage: summarize.py RESULTS_DIR"""
import json
import os
import re
import statistics
import sys

out = sys.argv[1]
lines = []


def p(s=""):
    lines.append(s)


def load(group):
    path = os.path.join(out, group + ".json")
    if not os.path.exists(path):
        return None
    return {r["command"]: r for r in json.load(open(path))["results"]}


def quantile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def ms(x):
    return x * 1000.0


def interleaved_rows(g, *ratios):
    """Prints an interleaved group's table: each command's median, p25-p75
    and minimum, then one column per (title, base_of(name)) ratio."""
    p(f"{'command':<24} {'median':>9} {'p25-p75':>17} {'min':>8}" + "".join(f" {title:>8}" for title, _ in ratios))
    for name, r in g.items():
        t = r["times"]
        row = f"{name:<24} {ms(r['median']):8.2f}m {ms(quantile(t, .25)):7.2f}-{ms(quantile(t, .75)):7.2f}m {ms(r['min']):7.2f}m"
        for _, base_of in ratios:
            base = base_of(name)
            row += f" {r['median'] / base['median']:7.2f}x" if base else f" {'':>8}"
        p(row)


verdicts = []


def verdict(name, ok, detail):
    verdicts.append((name, "PASS" if ok else "FAIL", detail))


def info(name, ok, detail):
    """A number reported beside a target that another measurement judges
    (docs/PERFORMANCE.md says which): one hyperfine invocation's ratio where
    an interleaved one decides, a fresh sandbox per call where the target is
    a warm session, host /bin/true where run_command runs sh -c."""
    verdicts.append((name, "info", detail + (" (within)" if ok else " (over)")))


def table(group, title, base="host", ref="bwrap"):
    g = load(group)
    if g is None:
        p(f"## {title}: not measured")
        p()
        return None
    p(f"## {title} ({group}.json)")
    p(f"{'command':<24} {'median':>9} {'p25-p75':>17} {'min':>8} {'cpu(u+s)':>9} {'/'+base:>8} {'/'+ref:>8}")
    for name, r in g.items():
        t = r["times"]
        sfx = "-" + name.rsplit("-", 1)[1] if re.search(r"-\d+$", name) else ""
        b_, f_ = base + sfx, ref + sfx
        row = f"{name:<24} {ms(r['median']):8.2f}m {ms(quantile(t, .25)):7.2f}-{ms(quantile(t, .75)):7.2f}m {ms(r['min']):7.2f}m {ms(r['user'] + r['system']):8.2f}m"
        row += f" {r['median'] / g[b_]['median']:7.2f}x" if b_ in g else f" {'':>8}"
        row += f" {r['median'] / g[f_]['median']:7.2f}x" if f_ in g else f" {'':>8}"
        p(row)
    p()
    return g


env = os.path.join(out, "env.txt")
p("# hutch benchmark summary")
if os.path.exists(env):
    for l in open(env):
        p("  " + l.rstrip())
p("  times in ms (m); ratios are of medians from the same hyperfine invocation")
p()

cold = table("cold", "Cold start: /bin/true")
if cold and "hutch" in cold:
    if "bwrap" in cold:
        for n in ("hutch", "hutch-net-none"):
            r = cold[n]["median"] / cold["bwrap"]["median"]
            info(f"cold start {n} <= 0.9x bwrap", r <= 0.9, f"{r:.2f}x ({ms(cold[n]['median']):.1f} vs {ms(cold['bwrap']['median']):.1f} ms)")
    else:
        verdict("cold start hutch <= 0.9x bwrap", False, "bwrap not measured")

il = load("cold-interleaved")
if il is not None:
    p("## Cold start, interleaved: one run of each command per round (cold-interleaved.json)")
    interleaved_rows(il, ("/host", lambda name: il.get("host")), ("/bwrap", lambda name: il.get("bwrap")))
    p()
    if "bwrap" in il:
        for n in ("hutch", "hutch-net-none", "hutch-git-workspace"):
            if n in il:
                r = il[n]["median"] / il["bwrap"]["median"]
                verdict(f"cold start {n} <= 0.9x bwrap (interleaved)", r <= 0.9, f"{r:.2f}x ({ms(il[n]['median']):.1f} vs {ms(il['bwrap']['median']):.1f} ms)")

table("pieces", "Pieces: runtime start, namespaces")
table("execstage", "Pieces: exec of the static binary up to the init's C constructor", base="bash-exec-true", ref="-")
disc = table("discovery", "Registry discovery cache cold vs no discovery", base="hutch-no-discover", ref="-")

loop = table("loop200", "Steady state: 200 (and 1000) x fork+exec /bin/true in sh")
if loop and "hutch" in loop:
    for n in ("hutch", "hutch-exec"):
        if n in loop:
            r = loop[n]["median"] / loop["host"]["median"]
            info(f"steady loop200 {n} <= 1.05x host", r <= 1.05, f"{r:.2f}x ({ms(loop[n]['median']):.1f} vs {ms(loop['host']['median']):.1f} ms, startup included)")
    if "hutch-1000" in loop and "host-1000" in loop:
        marg = {n: (loop[n + "-1000"]["median"] - loop[n]["median"]) / 800 for n in ("host", "bwrap", "hutch", "hutch-exec") if n + "-1000" in loop and n in loop}
        p("marginal cost of one fork+exec of /bin/true, startup excluded, (median1000 - median200) / 800:")
        p("  " + ", ".join(f"{n} {ms(v):.3f} ms ({v / marg['host']:.2f}x host)" for n, v in marg.items()))
        p()
        for n in ("hutch", "hutch-exec"):
            if n in marg:
                r = marg[n] / marg["host"]
                info(f"steady loop marginal {n} (startup excluded) <= 1.05x host", r <= 1.05, f"{r:.2f}x ({ms(marg[n]):.3f} vs {ms(marg['host']):.3f} ms per fork+exec)")
gcc = table("gcc", "Steady state: gcc -O2 -c of a 200-line file")
if gcc and "hutch" in gcc:
    for n in ("hutch", "hutch-exec"):
        if n in gcc:
            r = gcc[n]["median"] / gcc["host"]["median"]
            info(f"steady gcc {n} <= 1.05x host", r <= 1.05, f"{r:.2f}x ({ms(gcc[n]['median']):.1f} vs {ms(gcc['host']['median']):.1f} ms, startup included)")

sil = load("steady-interleaved")
if sil is not None:
    p("## Steady state, interleaved: one run of each command per round (steady-interleaved.json)")
    interleaved_rows(sil, ("/host", lambda name: sil.get("gcc-host" if name.startswith("gcc-") else "host")))
    p()
    # The steady state is work inside a running sandbox, judged in paired
    # chunks (paired.json, paired-gcc.json) without any start; the
    # interleaved runs with a start in them are info.
    for n, host in (("hutch", "host"), ("hutch-exec", "host"), ("gcc-hutch", "gcc-host"), ("gcc-hutch-exec", "gcc-host")):
        if n in sil and host in sil:
            r = sil[n]["median"] / sil[host]["median"]
            what = "gcc" if n.startswith("gcc-") else "loop200"
            info(f"steady {what} {n.removeprefix('gcc-')} <= 1.05x host (interleaved)", r <= 1.05, f"{r:.2f}x ({ms(sil[n]['median']):.1f} vs {ms(sil[host]['median']):.1f} ms, startup included)")

for fname, what in (("paired", "loop"), ("paired-gcc", "gcc")):
    path = os.path.join(out, fname + ".json")
    if not os.path.exists(path):
        continue
    pj = json.load(open(path))
    ch = pj["chunks"]
    host = ch.get("host")
    if not host:
        continue
    unit = pj.get("unit", "/bin/true")
    p(f"## Steady state in paired chunks: {pj['k']} x `{unit}` per chunk, timed inside, workers taking turns ({fname}.json)")
    p(f"  {len(host)} rounds; ratio of total times (per-round ratios: median, p25-p75)")
    per = {}
    for n, v in ch.items():
        rs = sorted(x / h for x, h in zip(v, host))
        per[n] = sum(v) / sum(host)
        p(f"  {n:16s} {sum(v) / len(v) / pj['k'] / 1000:8.3f} ms per run  {per[n]:.3f}x host  (median {statistics.median(rs):.3f}x, {quantile(rs, .25):.3f}-{quantile(rs, .75):.3f}x)")
    for ref in ("host-sandbox-env", "bwrap"):
        if ref in per and "hutch-exec" in per:
            p(f"  hutch-exec / {ref}: {per['hutch-exec'] / per[ref]:.3f}x")
    p()
    if "hutch-exec" in per:
        r = per["hutch-exec"]
        verdict(f"steady {what} hutch-exec in paired chunks (start excluded) <= 1.05x host", r <= 1.05, f"{r:.3f}x (total of {len(host)} chunks each)")

ex = table("exec", "Exec into a running container/session", base="host", ref="crun-exec")
eil = load("exec-interleaved")
if eil is not None:
    p("## Exec into a running container/session, interleaved: one run of each per round (exec-interleaved.json)")
    interleaved_rows(eil, ("/host", lambda name: eil.get("host")), ("/crun-exec", lambda name: eil.get("crun-exec")))
    p()
if ex and "hutch-exec" in ex and "crun-exec" in ex:
    r = ex["hutch-exec"]["median"] / ex["crun-exec"]["median"]
    (info if eil is not None else verdict)("hutch exec <= 0.6x crun exec", r <= 0.6, f"{r:.2f}x" + (" (one hyperfine invocation)" if eil is not None else ""))
if eil is not None and "hutch-exec" in eil and "crun-exec" in eil:
    r = eil["hutch-exec"]["median"] / eil["crun-exec"]["median"]
    verdict("hutch exec <= 0.6x crun exec (interleaved)", r <= 0.6, f"{r:.2f}x ({ms(eil['hutch-exec']['median']):.2f} vs {ms(eil['crun-exec']['median']):.2f} ms)")
elif not (ex and "hutch-exec" in ex and "crun-exec" in ex):
    verdict("hutch exec <= 0.6x crun exec", False, "not measured: " + ("no sessions in this hutch" if not (ex and "hutch-exec" in ex) else "no crun"))

# Go benchmarks
gob = {}
gop = os.path.join(out, "go-bench.txt")
if os.path.exists(gop):
    for l in open(gop):
        m = re.match(r"^(Benchmark\S+?)(-\d+)?\s+(\d+)\s+([\d.]+) ns/op(.*)$", l)
        if m:
            extra = dict((k, float(v)) for v, k in re.findall(r"([\d.]+) (\S+)", m.group(5)))
            gob[m.group(1)] = (float(m.group(4)) / 1e6, extra)
    skips = [l.strip() for l in open(gop) if "SKIP" in l or "bench_test.go" in l]
if gob:
    p("## Go benchmarks (go-bench.txt; mean ms/op of one go test run)")
    host = gob.get("BenchmarkHostTrue", (None,))[0]
    for k, (v, extra) in gob.items():
        rel = f"  (+{v - host:6.2f} ms vs host)" if host else ""
        ext = "  " + " ".join(f"{n}={x:.2f}" for n, x in extra.items()) if extra else ""
        p(f"{k:<52} {v:8.2f} ms{rel}{ext}")
    p()
    for k in ("BenchmarkGoAPIRunTrue/net=proxy", "BenchmarkGoAPIRunTrue/net=none"):
        if k in gob and host:
            d = gob[k][0] - host
            info(f"Go API run_command ({k.split('/')[1]}) <= host + 1 ms", d <= 1.0, f"host + {d:.1f} ms (fresh sandbox per call)")
    for k in ("BenchmarkGoAPISessionExecTrue/net=proxy", "BenchmarkGoAPISessionExecTrue/net=none"):
        if k in gob and host:
            d = gob[k][0] - host
            verdict(f"Go API run_command, warm session ({k.split('/')[1]}) <= host + 1 ms", d <= 1.0, f"host + {d:.1f} ms (Session.Exec)")
    if "BenchmarkMCPRunCommand" in gob and host:
        d = gob["BenchmarkMCPRunCommand"][0] - host
        info("MCP run_command <= host + 1 ms", d <= 1.0, f"host + {d:.1f} ms (JSON-RPC round trip, sh -c, the server's executor)")
        hostsh = gob.get("BenchmarkHostShTrue", (None,))[0]
        if hostsh:
            d = gob["BenchmarkMCPRunCommand"][0] - hostsh
            info("MCP run_command <= host sh -c + 1 ms", d <= 1.0, f"host sh -c + {d:.2f} ms (means of two benchmarks run one after the other)")
    paired = gob.get("BenchmarkMCPRunCommandPaired", (None, {}))[1]
    if "over-ms" in paired:
        d = paired["over-ms"]
        verdict("MCP run_command <= host sh -c + 1 ms (paired)", d <= 1.0,
                f"host sh -c + {d:.2f} ms (median of per-call differences; host {paired.get('host-sh-ms', 0):.2f}, MCP {paired.get('mcp-ms', 0):.2f} ms)")
else:
    verdict("Go API run_command <= host + 1 ms", False, "not measured (go benchmarks skipped)")

# Go package initialization (GODEBUG=inittrace=1 hutch --version)
itp = os.path.join(out, "go-inittrace.txt")
if os.path.exists(itp):
    runs, cur = [], None
    for l in open(itp):
        if l.startswith("--- run"):
            cur = {}
            runs.append(cur)
            continue
        m = re.match(r"^init (\S+) @([\d.]+) ms, ([\d.]+) ms clock", l)
        if m and cur is not None:
            cur[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    runs = [r for r in runs if r]
    if runs:
        rt = [r["runtime"][1] for r in runs if "runtime" in r]
        pk = [sum(c for k, (_, c) in r.items() if k != "runtime") for r in runs]
        tm = [max(a + c for a, c in r.values()) for r in runs]
        p(f"## Go start of hutch --version ({len(runs)} runs, GODEBUG=inittrace=1; go-inittrace.txt)")
        p(f"runtime init {statistics.median(rt):.2f} ms, package inits {statistics.median(pk):.2f} ms ({len(runs[0]) - 1} packages), "
          f"last init done at {statistics.median(tm):.2f} ms after process start (medians)")
        names = set(k for r in runs for k in r if k != "runtime")
        top = sorted(names, key=lambda k: -statistics.median([r.get(k, (0, 0))[1] for r in runs]))[:8]
        p("slowest package inits (median ms): " + ", ".join(f"{k} {statistics.median([r.get(k, (0, 0))[1] for r in runs]):.2f}" for k in top))
        p()

# memory
memp = os.path.join(out, "memory.txt")
if os.path.exists(memp):
    p("## Resident memory (max VmRSS sampled every 10 ms during `run -- sleep 2`)")
    for l in open(memp):
        f = dict(x.split("=") for x in l.split()[1:])
        name = l.split()[0]
        p(f"{name:<16} supervisor {int(f['supervisor_rss_max_kb']) / 1024:6.1f} MiB (VmHWM {int(f['supervisor_hwm_kb']) / 1024:5.1f})"
          f"  init {int(f['init_rss_max_kb']) / 1024:6.1f} MiB  ({f['samples']} samples)")
        if name.startswith(("hutch", "session")):
            kib = max(int(f["supervisor_rss_max_kb"]), int(f["supervisor_hwm_kb"]))
            verdict(f"supervisor RSS ({name}) <= 20 MB", kib * 1024 <= 20e6,
                    f"{kib * 1024 / 1e6:.1f} MB = {kib / 1024:.1f} MiB (max of sampled VmRSS and VmHWM)")
    p()

# stages
stp = os.path.join(out, "stages.txt")
if os.path.exists(stp):
    runs, cur = [], {}
    for l in open(stp):
        m = re.match(r"^hutch: timing (\S+)\s+([\d.]+) ms", l)
        if not m:
            continue
        cur[m.group(1)] = float(m.group(2))
        if m.group(1) == "wall":
            runs.append(cur)
            cur = {}
    runs = [r for r in runs if "total" in r]
    if runs:
        for r in runs:
            # init.exec (fork to the init's constructor) overlaps with the
            # supervisor's planning; the init's own work follows it.
            inits = sum(v for k, v in r.items() if k.startswith(("init.", "mounts.")) and k != "init.exec")
            r["=init work after its exec (sum)"] = inits
            if "supervisor.start" in r and "supervisor.plan" in r:
                after = r["total"] - r["supervisor.start"]
                if "exec" in r:
                    r["=teardown (total-start-exec)"] = after - r["exec"]
                else:
                    r["=exec+wait+teardown"] = after
            r["=process start+CLI+exit (wall-total)"] = r["wall"] - r["total"]
        p(f"## Per-stage timings: hutch run --debug -- /bin/true, {len(runs)} runs (stages.txt)")
        p("   supervisor.start and total are cumulative from the start of hutch.Run, exec is Session.Exec;")
        p("   wall is the bash loop's clock around the process; '=' rows are derived")
        p(f"{'stage':<34} {'median':>8} {'p10-p90':>17}")
        keys = list(dict.fromkeys(k for r in runs for k in r))
        for k in keys:
            xs = [r[k] for r in runs if k in r]
            p(f"{k:<34} {statistics.median(xs):7.3f}m {quantile(xs, .1):7.3f}-{quantile(xs, .9):7.3f}m")
        p()

skp = os.path.join(out, "skipped.txt")
if os.path.exists(skp):
    p("## Skipped")
    for l in open(skp):
        p("- " + l.rstrip())
    p()

p("## Targets")
for n, v, d in verdicts:
    p(f"{v:<5} {n:<64} {d}")
print("\n".join(lines))
