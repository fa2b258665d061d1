// The scope agents' server keeps one session connected ahead of need (src/base/scope-fs.ts): the
// next scope is opened by it, a dead one is never used, and every session ends reaped.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ScopeFs, scopeFsBinaryPath } from '../../src/base/scope-fs.js';
import { testScopeDir } from '../helpers/workspace.js';

const built = scopeFsBinaryPath() !== null;

/** pid and state letter of every process whose parent is `ppid`. */
function childrenOf(ppid: number): { pid: number; state: string; cmd: string }[] {
  const out: { pid: number; state: string; cmd: string }[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(rest[1]) !== ppid) continue;
      out.push({ pid: Number(name), state: rest[0] ?? '?', cmd: readFileSync(`/proc/${name}/cmdline`, 'utf8').replace(/\0/g, ' ') });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

const server = (): number => {
  const s = childrenOf(process.pid).find((c) => c.cmd.includes('airlock-scopefs') && c.cmd.includes('--serve'));
  assert.ok(s, 'the scope agent server runs as a child of this process');
  return s.pid;
};
const pidOf = (fs: ScopeFs): number => Number(fs.rootByDescriptor.split('/')[2]);
const until = async (what: string, ok: () => boolean): Promise<void> => {
  for (let i = 0; i < 500 && !ok(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(ok(), what);
};

/** Runs `f` on a fresh scope folder that holds a.txt, removed afterwards. */
async function inScope(f: (t: string) => Promise<void>): Promise<void> {
  const t = testScopeDir('spare-');
  writeFileSync(join(t, 'a.txt'), 'a\n');
  try {
    await f(t);
  } finally {
    rmSync(t, { recursive: true, force: true });
  }
}

/** The session the server holds ahead of need, once it is the server's only child (every other reaped). */
async function waitingSession(srv: number, not?: number): Promise<number> {
  await until('one session waits, every other is reaped', () => {
    const kids = childrenOf(srv);
    return kids.length === 1 && kids[0]?.pid !== not && kids[0]?.state === 'S';
  });
  return childrenOf(srv)[0]!.pid;
}

/** Opens the scope `t`, checks what it lists, closes it; returns the session's pid. */
async function openList(t: string): Promise<number> {
  const fs = await ScopeFs.open(t, 'dir');
  try {
    assert.deepEqual(await fs.list(''), ['a.txt']);
    return pidOf(fs);
  } finally {
    fs.close();
  }
}

test('after a scope agent ends, the next one is already forked and waiting: the next scope is opened by that session', { skip: !built }, () =>
  inScope(async (t) => {
    const first = await openList(t);
    const spare = await waitingSession(server(), first);
    assert.equal(await openList(t), spare, 'the waiting session opened the next scope');
  }));

test('a waiting session that died is not used: the next scope gets a new session, and the dead one is reaped', { skip: !built }, () =>
  inScope(async (t) => {
    await openList(t);
    const srv = server();
    const spare = await waitingSession(srv);
    process.kill(spare, 'SIGKILL');
    await until('the killed session is a zombie of the server', () => childrenOf(srv).some((c) => c.pid === spare && c.state === 'Z'));
    await new Promise((r) => setTimeout(r, 50)); // its connection's close reaches us
    assert.notEqual(await openList(t), spare);
    await until('the dead session is reaped', () => !childrenOf(srv).some((c) => c.pid === spare));
  }));

test('many scopes opened and closed leave one waiting session and no zombie', { skip: !built }, () =>
  inScope(async (t) => {
    for (let i = 0; i < 30; i++) await openList(t);
    await waitingSession(server());
  }));

test('another local user cannot reach the agent server or the session waiting as root: no connection, no signal, no descriptor', { skip: !built || process.getuid?.() !== 0 }, () =>
  inScope(async (t) => {
    await openList(t);
    const srv = server();
    const spare = await waitingSession(srv);
    // The server decodes its hex argument in place: its command line shows the socket's path.
    const socketPath = readFileSync(`/proc/${srv}/cmdline`, 'utf8').split('\0')[2] ?? '';
    assert.match(socketPath, /^\/.*\/s$/);
    // The hostile program, as uid 4242: connect to the server and ask for a root session on /, stop
    // the waiting session, take its descriptors.
    const hostile = [
      'import json, os, signal, socket, sys',
      'out = {}',
      'try:',
      '    s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(sys.argv[1])',
      "    s.sendall(b'2f dir\\n'); out['connect'] = s.recv(200).decode()",
      'except OSError as e:',
      "    out['connect'] = 'errno %d' % e.errno",
      'try:',
      "    os.kill(int(sys.argv[2]), signal.SIGSTOP); out['signal'] = 'sent'",
      'except OSError as e:',
      "    out['signal'] = 'errno %d' % e.errno",
      'try:',
      "    out['fds'] = os.listdir('/proc/%s/fd' % sys.argv[2])",
      'except OSError as e:',
      "    out['fds'] = 'errno %d' % e.errno",
      'print(json.dumps(out))',
    ].join('\n');
    const r = spawnSync('/usr/bin/python3', ['-c', hostile, socketPath, String(spare)], { uid: 4242, gid: 4242, encoding: 'utf8' });
    assert.equal(r.status, 0, `the hostile program failed: ${r.stderr}`);
    const got = JSON.parse(r.stdout) as Record<string, string>;
    assert.equal(got.connect, `errno ${constants.errno.EACCES}`, `the server's socket answered another user: ${got.connect}`);
    assert.equal(got.signal, `errno ${constants.errno.EPERM}`);
    assert.equal(got.fds, `errno ${constants.errno.EACCES}`);
    // The waiting session is untouched: it opens the next scope.
    assert.equal(await openList(t), spare);
  }));
