// What the MCP end-to-end tests share: the user hutch runs as, its
// directories, and the command line and environment that start it.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// As root (CI), hutch runs as uid/gid 65534 through setpriv.
export const TEST_UID = 65534;
export const asRoot = process.getuid() === 0;

// userDir makes a directory the hutch user owns, reachable through a
// traversable chain, and records it in dirs for removal.
export function userDir(dirs, prefix) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(d);
  fs.chmodSync(d, 0o755);
  if (asRoot) fs.chownSync(d, TEST_UID, TEST_UID);
  return d;
}

// hutchCommand is the command and arguments that run bin with hutchArgs
// as the hutch user.
export function hutchCommand(bin, hutchArgs) {
  if (!asRoot) return { command: bin, args: hutchArgs };
  return { command: 'setpriv', args: [`--reuid=${TEST_UID}`, `--regid=${TEST_UID}`, '--clear-groups', bin, ...hutchArgs] };
}

// hutchEnv is hutch's environment, with its home and XDG directories under
// state.
export function hutchEnv(state) {
  return {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: state,
    XDG_STATE_HOME: path.join(state, 'state'),
    XDG_CACHE_HOME: path.join(state, 'cache'),
    LANG: 'C.UTF-8',
  };
}
