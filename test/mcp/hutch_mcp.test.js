// End-to-end test of `hutch mcp` through the official MCP TypeScript SDK:
// the client spawns `$HUTCH_BIN mcp --workspace <tmpdir>` over stdio, lists
// the tools and calls run_command. When run as root (CI), hutch runs as
// uid/gid 65534 through setpriv, like the Go end-to-end tests.
//
//   HUTCH_BIN=$PWD/bin/hutch bash test/mcp/run.sh
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import { TEST_UID, asRoot, userDir as makeUserDir, hutchCommand, hutchEnv } from './hutch.js';

let client;
let transport;
let workspace;
let stderrLog = '';
let publishedPort;
const tmpDirs = [];

// A port of the host's loopback that nothing listens on.
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const userDir = (prefix) => makeUserDir(tmpDirs, prefix);

before(async () => {
  const src = process.env.HUTCH_BIN;
  assert.ok(src, 'HUTCH_BIN is not set: point it at the built hutch binary (make build; HUTCH_BIN=$PWD/bin/hutch bash test/mcp/run.sh)');
  assert.ok(fs.existsSync(src), `HUTCH_BIN ${src} does not exist`);
  // A copy the test user can execute wherever the original lives.
  const binDir = userDir('hutch-mcp-bin-');
  const bin = path.join(binDir, 'hutch');
  fs.copyFileSync(src, bin);
  fs.chmodSync(bin, 0o755);
  workspace = userDir('hutch-mcp-ws-');
  const state = userDir('hutch-mcp-state-');

  publishedPort = await freePort();
  const hutchArgs = ['mcp', '--workspace', workspace, '--security-log', path.join(state, 'security.log'),
    '--publish', `127.0.0.1:${publishedPort}:8080`];
  const { command, args } = hutchCommand(bin, hutchArgs);
  transport = new StdioClientTransport({ command, args, cwd: workspace, env: hutchEnv(state), stderr: 'pipe' });
  transport.stderr.on('data', (chunk) => { stderrLog += chunk.toString(); });
  client = new Client({ name: 'hutch-mcp-test', version: '1.0.0' });
  try {
    await client.connect(transport);
  } catch (err) {
    await new Promise((r) => setTimeout(r, 200)); // let the last of stderr arrive
    throw new Error(`cannot start the MCP server (${command} ${args.join(' ')}): ${err.message}\nserver stderr:\n${stderrLog}`);
  }
});

after(async () => {
  if (client) await client.close();
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

// run calls run_command and checks the result carries structured content
// and the compact text block.
async function run(args) {
  const res = await client.callTool({ name: 'run_command', arguments: args });
  assert.ok(!res.isError, `run_command(${JSON.stringify(args)}) returned a tool error: ${JSON.stringify(res.content)}\nserver stderr:\n${stderrLog}`);
  const out = res.structuredContent;
  assert.ok(out, `no structuredContent in ${JSON.stringify(res)}`);
  const text = res.content.find((c) => c.type === 'text');
  assert.ok(text, `no text content in ${JSON.stringify(res.content)}`);
  assert.match(text.text, new RegExp(`^exit_code: ${out.exit_code}\\b`));
  return { out, text: text.text };
}

function explain(out) {
  return `result: ${JSON.stringify(out, null, 1)}\nserver stderr:\n${stderrLog}`;
}

test('lists run_command with its input and output schema', async () => {
  const { tools } = await client.listTools();
  const tool = tools.find((t) => t.name === 'run_command');
  assert.ok(tool, `run_command not among ${tools.map((t) => t.name)}`);
  // hutch mcp mounts the workspace at its own host path.
  assert.ok(tool.description.includes(`at its own host path, ${workspace}`), tool.description);
  assert.match(tool.description, /network blocked by policy/);
  assert.equal(tool.inputSchema.type, 'object');
  assert.deepEqual(Object.keys(tool.inputSchema.properties).sort(), ['background', 'command', 'cwd', 'fresh', 'timeout_seconds']);
  assert.deepEqual(tool.inputSchema.required, ['command']);
  assert.equal(tool.inputSchema.properties.command.type, 'string');
  assert.equal(tool.inputSchema.properties.timeout_seconds.type, 'integer');
  assert.ok(tool.outputSchema, 'no outputSchema');
  assert.deepEqual(Object.keys(tool.outputSchema.properties).sort(), [
    'background_id', 'exit_code', 'image', 'isolation', 'isolation_limits', 'pending_changes', 'policy_events', 'sandbox_id', 'stderr',
    'stderr_truncated', 'stdout', 'stdout_truncated', 'timed_out',
  ]);
  const bg = tools.find((t) => t.name === 'background');
  assert.ok(bg, `background not among ${tools.map((t) => t.name)}`);
  assert.deepEqual(Object.keys(bg.inputSchema.properties).sort(), ['id', 'stop']);
  assert.match(bg.description, new RegExp(`sandbox port 8080 at 127\\.0\\.0\\.1:${publishedPort}`));
});

test('success: stdout and exit code 0', async () => {
  const { out, text } = await run({ command: 'echo hello' });
  assert.equal(out.stdout, 'hello\n', explain(out));
  assert.equal(out.stderr, '', explain(out));
  assert.equal(out.exit_code, 0, explain(out));
  assert.equal(out.timed_out, false);
  assert.equal(out.stdout_truncated, false);
  assert.equal(out.stderr_truncated, false);
  assert.deepEqual(out.policy_events, []);
  assert.match(out.sandbox_id, /^\S+$/);
  assert.match(text, /--- stdout ---\nhello\n/);
});

test('failure: a non-zero exit is a normal result with stderr', async () => {
  const { out, text } = await run({ command: 'echo oops >&2; exit 3' });
  assert.equal(out.exit_code, 3, explain(out));
  assert.equal(out.stderr, 'oops\n', explain(out));
  assert.equal(out.stdout, '', explain(out));
  assert.equal(out.timed_out, false);
  assert.match(text, /^exit_code: 3\n--- stderr ---\noops\n/);
});

test('timeout: timeout_seconds ends the command with 124', async () => {
  const t0 = Date.now();
  const { out } = await run({ command: 'sleep 30', timeout_seconds: 1 });
  const elapsed = (Date.now() - t0) / 1000;
  assert.equal(out.timed_out, true, explain(out));
  assert.equal(out.exit_code, 124, explain(out));
  assert.ok(out.policy_events.some((e) => e.includes('timed out after 1s')), explain(out));
  assert.ok(elapsed < 20, `took ${elapsed}s`);
});

test('network: a destination off the allowlist is blocked and reported', async () => {
  const { out } = await run({ command: 'curl -sS https://blocked.example/' });
  assert.notEqual(out.exit_code, 0, explain(out));
  assert.ok(
    out.policy_events.some((e) => e.includes('network blocked by policy: destination blocked.example:443 not allowlisted')),
    explain(out),
  );
});

test('workspace: at its host path; files written there reach the host; cwd is relative to it', async () => {
  fs.mkdirSync(path.join(workspace, 'sub'));
  if (asRoot) fs.chownSync(path.join(workspace, 'sub'), TEST_UID, TEST_UID);
  const { out } = await run({ command: 'pwd; echo data > out.txt', cwd: 'sub' });
  assert.equal(out.exit_code, 0, explain(out));
  assert.equal(out.stdout, `${workspace}/sub\n`, explain(out));
  const file = path.join(workspace, 'sub', 'out.txt');
  assert.equal(fs.readFileSync(file, 'utf8'), 'data\n');
  // The sandbox maps its user to the one running hutch on the host.
  assert.equal(fs.statSync(file).uid, asRoot ? TEST_UID : process.getuid());
});

test('output beyond the cap is truncated with a marker', async () => {
  const { out } = await run({ command: 'head -c 1100000 /dev/zero | tr "\\0" a' });
  assert.equal(out.exit_code, 0, explain({ ...out, stdout: out.stdout.slice(-100) }));
  assert.equal(out.stdout_truncated, true);
  assert.ok(out.stdout.endsWith('a\n[hutch: output truncated: 51424 bytes dropped]\n'), out.stdout.slice(-100));
});

test('the cap counts the output as JSON escapes it, and the output comes once', async () => {
  // A NUL is six bytes in JSON (\u0000): the kept output is a sixth of the
  // cap in characters, and the text repeats only its end.
  const { out, text } = await run({ command: 'head -c 20000000 /dev/zero; head -c 20000000 /dev/zero >&2' });
  assert.equal(out.exit_code, 0, explain({ ...out, stdout: '', stderr: '' }));
  for (const s of [out.stdout, out.stderr]) {
    assert.match(s, /\n\[hutch: output truncated: \d+ bytes dropped\]\n$/);
    assert.ok(JSON.stringify(s).length <= (1 << 20) + 100, `${JSON.stringify(s).length} bytes of JSON`);
  }
  assert.ok(out.stdout_truncated && out.stderr_truncated);
  assert.match(text, /--- stdout \(the last \d+ of \d+ bytes\) ---/);
  assert.ok(text.length < 16384, `text of ${text.length} characters`);
});

test('invalid input is a tool error with the reason', async () => {
  const res = await client.callTool({ name: 'run_command', arguments: { command: 'ls', cwd: '../etc' } });
  assert.equal(res.isError, true, JSON.stringify(res));
  assert.ok(res.content[0].text.includes(`outside ${workspace}:`), res.content[0].text);

  const big = await client.callTool({ name: 'run_command', arguments: { command: 'ls', timeout_seconds: 100000 } });
  assert.equal(big.isError, true, JSON.stringify(big));
  assert.match(big.content[0].text, /exceeds the policy's limit of 600 seconds/);
});

test('progress: a long call reports progress to a client that asks for it', async () => {
  const progress = [];
  const res = await client.callTool({ name: 'run_command', arguments: { command: 'sleep 11; echo done' } }, undefined, {
    onprogress: (p) => progress.push(p),
    resetTimeoutOnProgress: true,
  });
  assert.ok(!res.isError, JSON.stringify(res));
  assert.equal(res.structuredContent.stdout, 'done\n');
  assert.ok(progress.length >= 1, 'no progress notification in 11s');
  assert.match(progress[0].message, /^running for \d+s$/);
  assert.ok(progress[0].progress >= 9, JSON.stringify(progress));
});

// callBackground calls the background tool and checks its result.
async function callBackground(args) {
  const res = await client.callTool({ name: 'background', arguments: args });
  assert.ok(!res.isError, `background(${JSON.stringify(args)}) returned a tool error: ${JSON.stringify(res.content)}\nserver stderr:\n${stderrLog}`);
  assert.ok(res.structuredContent, `no structuredContent in ${JSON.stringify(res)}`);
  return res.structuredContent;
}

test('background: a dev server outlives its call and is reached from the host through --publish', async () => {
  const started = await client.callTool({ name: 'run_command', arguments: { command: 'exec python3 -m http.server 8080', background: true } });
  assert.ok(!started.isError, JSON.stringify(started.content));
  const id = started.structuredContent.background_id;
  assert.match(id, /^\d+$/, explain(started.structuredContent));
  assert.match(started.content[0].text, /^background_id: \d+\n/);

  // The host reaches it once it listens.
  let body;
  for (let i = 0; i < 150 && body === undefined; i++) {
    try {
      const r = await fetch(`http://127.0.0.1:${publishedPort}/`, { signal: AbortSignal.timeout(5000) });
      if (r.status === 200) body = await r.text();
    } catch { /* not listening yet */ }
    if (body === undefined) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(body !== undefined, `no answer on 127.0.0.1:${publishedPort}\nserver stderr:\n${stderrLog}`);
  assert.match(body, /Directory listing/);

  const list = await callBackground({});
  const entry = list.commands.find((c) => c.id === id);
  assert.ok(entry && entry.running, JSON.stringify(list));
  assert.equal(entry.command, 'exec python3 -m http.server 8080');
  assert.equal(entry.stdout, undefined, 'a listing carries no output');

  const one = await callBackground({ id });
  assert.match(one.commands[0].stderr, /"GET \/ HTTP\/1\.1" 200/, JSON.stringify(one));

  const stopped = await callBackground({ id, stop: true });
  const end = stopped.commands[0];
  assert.equal(end.running, false, JSON.stringify(stopped));
  assert.equal(end.stopped, true);
  assert.equal(end.exit_code, 143, JSON.stringify(stopped));

  const unknown = await client.callTool({ name: 'background', arguments: { id: '999' } });
  assert.equal(unknown.isError, true);
  assert.match(unknown.content[0].text, /no background command "999"/);
});
