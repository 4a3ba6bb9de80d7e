// End-to-end test of `hutch mcp --listen` (MCP over HTTP) through the
// official MCP TypeScript SDK's Streamable HTTP client: the server runs on
// an ephemeral loopback port with a token file; clients pass the token as
// a bearer header (requestInit), each gets a sandbox of its own, and
// terminateSession (HTTP DELETE) ends it. When run as root (CI), hutch runs
// as uid/gid 65534 through setpriv, like the Go end-to-end tests.
//
//   HUTCH_BIN=$PWD/bin/hutch bash test/mcp/run.sh
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { TEST_UID, asRoot, userDir as makeUserDir, hutchCommand, hutchEnv } from './hutch.js';

let server;
let exited;
let url;
let token;
let stderrLog = '';
const tmpDirs = [];
const clients = [];

const userDir = (prefix) => makeUserDir(tmpDirs, prefix);

before(async () => {
  const src = process.env.HUTCH_BIN;
  assert.ok(src, 'HUTCH_BIN is not set: point it at the built hutch binary (make build; HUTCH_BIN=$PWD/bin/hutch bash test/mcp/run.sh)');
  const binDir = userDir('hutch-mcp-http-bin-');
  const bin = path.join(binDir, 'hutch');
  fs.copyFileSync(src, bin);
  fs.chmodSync(bin, 0o755);
  const workspace = userDir('hutch-mcp-http-ws-');
  const state = userDir('hutch-mcp-http-state-');
  token = crypto.randomBytes(32).toString('base64url');
  const tokenFile = path.join(state, 'token');
  fs.writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
  if (asRoot) fs.chownSync(tokenFile, TEST_UID, TEST_UID);

  const hutchArgs = ['mcp', '--listen', '127.0.0.1:0', '--token-file', tokenFile, '--workspace', workspace,
    '--security-log', path.join(state, 'security.log')];
  const { command, args } = hutchCommand(bin, hutchArgs);
  server = spawn(command, args, { cwd: workspace, env: hutchEnv(state), stdio: ['ignore', 'ignore', 'pipe'] });
  exited = new Promise((resolve) => server.on('exit', (code, signal) => resolve({ code, signal })));
  url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`hutch mcp --listen said no URL within 30s; stderr:\n${stderrLog}`)), 30000);
    server.stderr.on('data', (chunk) => {
      stderrLog += chunk.toString();
      const m = stderrLog.match(/url=(http:\/\/\S+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    exited.then(({ code }) => { clearTimeout(timer); reject(new Error(`hutch mcp --listen exited (${code}); stderr:\n${stderrLog}`)); });
  });
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  if (server && server.exitCode === null) {
    server.kill('SIGTERM');
    const { code } = await exited;
    assert.equal(code, 0, `hutch mcp --listen exited ${code} after SIGTERM; stderr:\n${stderrLog}`);
  }
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

// connect opens an MCP session over HTTP with bearer as the token.
async function connect(bearer = token) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
  });
  const client = new Client({ name: 'hutch-mcp-http-test', version: '1.0.0' });
  await client.connect(transport);
  clients.push(client);
  return { client, transport };
}

async function run(client, args) {
  const res = await client.callTool({ name: 'run_command', arguments: args });
  assert.ok(!res.isError, `run_command(${JSON.stringify(args)}): ${JSON.stringify(res.content)}\nserver stderr:\n${stderrLog}`);
  assert.ok(res.structuredContent, `no structuredContent in ${JSON.stringify(res)}`);
  return res.structuredContent;
}

test('over HTTP: the tools, a command, a session id', async () => {
  const { client, transport } = await connect();
  assert.match(transport.sessionId, /^\S+$/);
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), ['background', 'run_command']);
  const out = await run(client, { command: 'echo hello; id -u' });
  assert.equal(out.exit_code, 0, JSON.stringify(out));
  assert.match(out.stdout, /^hello\n\d+\n$/);
  assert.ok(stderrLog.includes(`session=${transport.sessionId}`), stderrLog);
});

test('two sessions, two sandboxes: one\'s /tmp is not the other\'s', async () => {
  const a = await connect();
  const b = await connect();
  assert.notEqual(a.transport.sessionId, b.transport.sessionId);
  await run(a.client, { command: 'echo mine > /tmp/only-a' });
  assert.equal((await run(a.client, { command: 'cat /tmp/only-a' })).stdout, 'mine\n');
  const other = await run(b.client, { command: 'test -e /tmp/only-a && echo seen || echo absent' });
  assert.equal(other.stdout, 'absent\n', JSON.stringify(other));
});

test('a wrong token is refused with 401', async () => {
  await assert.rejects(connect('not-the-token'), (err) => {
    assert.match(String(err), /401|unauthorized/i);
    return true;
  });
});

test('progress notifications arrive over the call\'s event stream', async () => {
  const { client } = await connect();
  const progress = [];
  const res = await client.callTool({ name: 'run_command', arguments: { command: 'sleep 11; echo done' } }, undefined, {
    onprogress: (p) => progress.push(p),
    resetTimeoutOnProgress: true,
  });
  assert.equal(res.structuredContent.stdout, 'done\n');
  assert.ok(progress.length >= 1, 'no progress notification in 11s');
  assert.match(progress[0].message, /^running for \d+s$/);
});

test('terminateSession (HTTP DELETE) ends the session and its sandbox', async () => {
  const { client, transport } = await connect();
  const id = transport.sessionId;
  await run(client, { command: 'true' });
  await transport.terminateSession();
  assert.match(stderrLog, new RegExp(`session ended" session=${id} why="deleted by the client"`));
  // The session is gone: a request with its id gets 404.
  const r = await fetch(url, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Mcp-Session-Id': id, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
  });
  assert.equal(r.status, 404);
});
