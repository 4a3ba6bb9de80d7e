#!/usr/bin/env python3
"""Memory of `hutch mcp --listen` per idle MCP session and per running command.

For each N in SESSIONS (default 1 5 10) it starts a fresh server on an
ephemeral loopback port (as uid 65534 through setpriv when run as root, as
the end-to-end tests do; with --as-root, as root: the cgroup backend), and
measures the server's process tree (the server and every descendant: each
session's sandbox supervisor, init, egress proxy and commands) three times:

  0 sessions        after start
  N idle sessions   after N initializes and one `true` call in each
  N commands        after each session starts `sleep 600` in the background

The sums of Pss (from /proc/PID/smaps_rollup: shared pages divided among
the processes that share them, so the sum is what the tree costs) and of
VmRSS (shared pages counted in every process) are printed as a Markdown
table, with the increments per session and per command. As root (--as-root:
the cgroup v1 backend) it also sums what the kernel charges the sandboxes'
memory cgroups (memory.usage_in_bytes), which counts the kernel memory and
tmpfs pages that Pss does not.

    make build && sudo python3 bench/mcp_http_memory.py [--as-root] [N ...]
"""
import http.client
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

TEST_UID = 65534


def descendants(pid):
    children = {}
    for e in os.listdir('/proc'):
        if not e.isdigit():
            continue
        try:
            with open(f'/proc/{e}/stat') as f:
                s = f.read()
        except OSError:
            continue
        ppid = int(s[s.rindex(')') + 2:].split()[1])
        children.setdefault(ppid, []).append(int(e))
    out, queue = [], [pid]
    while queue:
        for c in children.get(queue.pop(), []):
            out.append(c)
            queue.append(c)
    return out


def memory(pid):
    """Sums of Pss and of Rss in KiB over pid and its descendants, their
    count, and what the sandboxes' memory cgroups are charged (KiB, or None)."""
    pss = rss = n = 0
    cg = cgroup_memory(pid)
    for p in [pid] + descendants(pid):
        try:
            with open(f'/proc/{p}/smaps_rollup') as f:
                for line in f:
                    if line.startswith('Pss:'):
                        pss += int(line.split()[1])
                    elif line.startswith('Rss:'):
                        rss += int(line.split()[1])
            n += 1
        except OSError:
            pass
    return pss, rss, n, cg


def cgroup_memory(pid):
    """Sum of memory.usage_in_bytes in KiB of the v1 memory cgroups that the
    server (pid) made for its sandboxes (hutch-PID-START-NAME): what the
    kernel charges them, kernel memory and tmpfs included; None without."""
    total, found = 0, False
    for root, dirs, _ in os.walk('/sys/fs/cgroup/memory'):
        for d in list(dirs):
            if d.startswith(f'hutch-{pid}-'):
                try:
                    with open(os.path.join(root, d, 'memory.usage_in_bytes')) as f:
                        total += int(f.read()) // 1024
                    found = True
                except OSError:
                    pass
                dirs.remove(d)
        if root.count('/') > 8:
            dirs.clear()
    return total if found else None


class Session:
    """One MCP session over plain HTTP (the Streamable HTTP transport)."""

    def __init__(self, port, token):
        self.conn = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
        self.token, self.sid, self.next = token, None, 1
        self.call('initialize', {'protocolVersion': '2025-06-18', 'capabilities': {},
                                 'clientInfo': {'name': 'bench', 'version': '1'}})
        self.post({'jsonrpc': '2.0', 'method': 'notifications/initialized'})

    def post(self, msg):
        h = {'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream',
             'Authorization': 'Bearer ' + self.token}
        if self.sid:
            h['Mcp-Session-Id'] = self.sid
            h['Mcp-Protocol-Version'] = '2025-06-18'
        self.conn.request('POST', '/mcp', json.dumps(msg), h)
        r = self.conn.getresponse()
        body = r.read().decode()
        if r.status >= 300:
            raise RuntimeError(f'{msg.get("method")}: HTTP {r.status}: {body}')
        self.sid = self.sid or r.getheader('Mcp-Session-Id')
        for line in body.splitlines():
            if line.startswith('data: '):
                return json.loads(line[6:])
        return json.loads(body) if body.strip() else None

    def call(self, method, params):
        self.next += 1
        a = self.post({'jsonrpc': '2.0', 'id': self.next, 'method': method, 'params': params})
        if 'error' in a:
            raise RuntimeError(f'{method}: {a["error"]}')
        return a['result']

    def run(self, command, background=False):
        r = self.call('tools/call', {'name': 'run_command', 'arguments': {'command': command, 'background': background}})
        if r.get('isError'):
            raise RuntimeError(f'run_command {command}: {r["content"]}')
        return r


def settle():
    time.sleep(2)


def measure(hutch, n, as_root):
    tmp = tempfile.mkdtemp(prefix='hutch-mcp-mem-')
    os.chmod(tmp, 0o755)
    ws, state = os.path.join(tmp, 'ws'), os.path.join(tmp, 'state')
    os.mkdir(ws)
    os.mkdir(state)
    token = secrets.token_urlsafe(32)
    tf = os.path.join(state, 'token')
    with open(tf, 'w') as f:
        f.write(token + '\n')
    os.chmod(tf, 0o600)
    bin_ = os.path.join(tmp, 'hutch')
    shutil.copy(hutch, bin_)
    os.chmod(bin_, 0o755)
    drop = os.getuid() == 0 and not as_root
    if drop:
        for d in (tmp, ws, state, tf):
            os.chown(d, TEST_UID, TEST_UID)
    argv = [bin_, 'mcp', '--listen', '127.0.0.1:0', '--token-file', tf, '--workspace', ws,
            '--security-log', os.path.join(state, 'security.log'), '--max-sessions', str(max(n, 1))]
    if drop:
        argv = ['setpriv', f'--reuid={TEST_UID}', f'--regid={TEST_UID}', '--clear-groups'] + argv
    env = {'PATH': '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'HOME': state,
           'XDG_STATE_HOME': os.path.join(state, 'state'), 'XDG_CACHE_HOME': os.path.join(state, 'cache'),
           'LANG': 'C.UTF-8'}
    srv = subprocess.Popen(argv, env=env, cwd=ws, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in srv.stderr:
            m = re.search(r'url=http://127\.0\.0\.1:(\d+)/mcp', line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            raise RuntimeError('the server said no URL')
        # The stderr pipe must keep draining: every request is logged.
        subprocess.Popen(['cat'], stdin=srv.stderr, stdout=subprocess.DEVNULL)
        pid = srv.pid
        if drop:  # setpriv execs hutch: same pid
            pass
        settle()
        base = memory(pid)
        sessions = [Session(port, token) for _ in range(n)]
        for s in sessions:
            s.run('true')
        settle()
        idle = memory(pid)
        for s in sessions:
            s.run('exec sleep 600', background=True)
        settle()
        busy = memory(pid)
        return base, idle, busy
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    args = sys.argv[1:]
    as_root = '--as-root' in args
    counts = [int(a) for a in args if a.isdigit()] or [1, 5, 10]
    hutch = os.path.abspath(os.environ.get('HUTCH_BIN', 'bin/hutch'))
    who = 'root (cgroup backend)' if as_root else (f'uid {TEST_UID} (rlimit backend)' if os.getuid() == 0 else f'uid {os.getuid()}')
    print(f'hutch mcp --listen as {who}; Pss / Rss of the process tree in MiB')
    print()
    print('| sessions | server alone | N idle sessions | per idle session | N running `sleep` | per running command | processes (idle / running) |')
    print('|---|---|---|---|---|---|---|')
    cgroups = []
    for n in counts:
        base, idle, busy = measure(hutch, n, as_root)
        mib = lambda kb: kb / 1024
        print(f'| {n} | {mib(base[0]):.1f} / {mib(base[1]):.1f} | {mib(idle[0]):.1f} / {mib(idle[1]):.1f} '
              f'| {mib(idle[0] - base[0]) / n:.2f} / {mib(idle[1] - base[1]) / n:.2f} '
              f'| {mib(busy[0]):.1f} / {mib(busy[1]):.1f} | {mib(busy[0] - idle[0]) / n:.2f} / {mib(busy[1] - idle[1]) / n:.2f} '
              f'| {idle[2]} / {busy[2]} |', flush=True)
        if idle[3] is not None:
            cgroups.append(f'| {n} | {mib(idle[3]):.1f} | {mib(idle[3]) / n:.2f} | {mib(busy[3]):.1f} | {mib(busy[3] - idle[3]) / n:.2f} |')
    if cgroups:
        print()
        print("The sandboxes' memory cgroups (memory.usage_in_bytes: kernel memory, page cache and tmpfs included), MiB:")
        print()
        print('| sessions | N idle sessions | per idle session | N running `sleep` | per running command |')
        print('|---|---|---|---|---|')
        print('\n'.join(cgroups))


if __name__ == '__main__':
    main()
