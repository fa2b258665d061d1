// A workspace another user could write, or reach by a way they could swap, is refused by every
// door (WS_NOT_PRIVATE): Airlock acts later, with its own authority, on what it keeps there.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs, { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mock, test } from 'node:test';
import { unsafeWorkspace } from '../../src/workspace/safety.js';
import { openWorkspace, WorkspaceError } from '../../src/workspace/workspace.js';
import { airlock } from '../helpers/cli.js';

const root = process.getuid?.() === 0;
const fresh = (): string => mkdtempSync(join(tmpdir(), 'airlock-ws-safety-'));

test('a workspace of the caller\'s own, below a sticky /tmp and through a link in a folder of ours, is used', () => {
  const d = fresh();
  assert.equal(unsafeWorkspace(join(d, 'ws')), null, 'not made yet: made by us, 0700');
  const ws = openWorkspace(join(d, 'ws'));
  assert.ok(existsSync(ws.policyFile));
  symlinkSync(ws.root, join(d, 'link'));
  assert.equal(unsafeWorkspace(join(d, 'link')), null);
});

test('refused: a workspace others can write, a kept folder others can write or that is a link (WS_NOT_PRIVATE)', () => {
  const d = fresh();
  const ws = openWorkspace(join(d, 'ws'));
  chmodSync(ws.root, 0o777);
  assert.throws(() => openWorkspace(ws.root), (e: unknown) => e instanceof WorkspaceError && e.code === 'WS_NOT_PRIVATE' && /ws can be written by others \(mode 0777\)$/.test(e.message.split('. Airlock')[0]!));
  chmodSync(ws.root, 0o755);
  chmodSync(join(ws.root, 'runs'), 0o733);
  assert.match(unsafeWorkspace(ws.root) ?? '', /runs \(mode 0733\) can be written by others$/);
  chmodSync(join(ws.root, 'runs'), 0o700);
  symlinkSync(fresh(), join(ws.root, 'promotions'));
  assert.match(unsafeWorkspace(ws.root) ?? '', /promotions is a link: Airlock makes none there$/);
});

test('refused: a way to the workspace through a folder others can write without the sticky bit, or through a link there', () => {
  const d = fresh();
  const open = join(d, 'open');
  mkdirSync(open);
  chmodSync(open, 0o777);
  assert.match(unsafeWorkspace(join(open, 'ws')) ?? '', /open can be written by others \(mode 0777\)$/);
  // A link kept in our folder, pointing into the open one: the way to its target is checked too.
  const mine = join(d, 'mine');
  mkdirSync(mine, { mode: 0o700 });
  symlinkSync(open, join(mine, 'via'));
  assert.match(unsafeWorkspace(join(mine, 'via', 'ws')) ?? '', /open can be written by others \(mode 0777\)$/);
  chmodSync(open, 0o1777);
  assert.equal(unsafeWorkspace(join(mine, 'via', 'ws')), null, 'sticky, as /tmp: others cannot rename what is ours there');
});

test('attack: another user makes the workspace\'s promotions folder theirs; every command refuses it and plants nothing', { skip: !root ? 'needs root (a folder of another user)' : false }, () => {
  const d = fresh();
  const ws = openWorkspace(join(d, 'ws'));
  for (const p of [d, ws.root]) chmodSync(p, 0o711); // traversable, so their folder is reachable to them
  mkdirSync(join(ws.root, 'promotions'), { mode: 0o700 });
  chownSync(join(ws.root, 'promotions'), 65534, 65534);
  // The attacker (uid 65534) plants a record in it, for a later `airlock recover` run as root.
  const plant = spawnSync('python3', ['-c', 'import os,sys; p=os.path.join(sys.argv[1],"inflight"); os.mkdir(p); open(os.path.join(p,"sbx-planted"),"w").close()', join(ws.root, 'promotions')], { uid: 65534, gid: 65534, encoding: 'utf8' });
  assert.equal(plant.status, 0, plant.stderr);
  for (const args of [['recover'], ['runs'], ['status']]) {
    const r = airlock([...args, '--workspace', ws.root]);
    assert.equal(r.code, 2, `${args[0]}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, new RegExp(`^airlock: WS_NOT_PRIVATE: the workspace ${ws.root} is not this user's alone: ${join(ws.root, 'promotions')} belongs to uid 65534, not to this user \\(uid 0\\)`));
  }
  const exec = airlock(['exec', '--workspace', ws.root, '--', '/bin/true']);
  assert.equal(exec.code, 125, 'exec: nothing ran');
  assert.deepEqual(readdirSync(join(ws.root, 'runs')), [], 'no run was made');
  // And a workspace inside another user's folder (root's workspace below alice's home, say).
  const theirs = join(d, 'theirs');
  mkdirSync(theirs, { mode: 0o755 });
  chownSync(theirs, 65534, 65534);
  const r = airlock(['runs', '--workspace', join(theirs, 'ws')]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /theirs belongs to uid 65534\. Airlock acts later/);
  assert.equal(existsSync(join(theirs, 'ws')), false, 'nothing made there');
});

test('refused: a link whose target goes ".." after a link is followed as the kernel does, not read as a string', () => {
  const d = fresh();
  const open = join(d, 'open');
  mkdirSync(join(open, 'deep'), { recursive: true });
  chmodSync(open, 0o777);
  mkdirSync(join(open, 'planted'));
  const mine = join(d, 'mine');
  mkdirSync(mine, { mode: 0o700 });
  symlinkSync(join(open, 'deep'), join(mine, 'x'));
  // mine/x/.. is the parent of x's target (open), not mine: the workspace is open/planted (as a
  // string, mine/planted: not made yet, so it looked like ours to make).
  symlinkSync('x/../planted', join(mine, 'ws'));
  symlinkSync(`${mine}/x/../planted`, join(mine, 'abs'));
  for (const ws of ['ws', 'abs']) {
    assert.equal(realpathSync.native(join(mine, ws)), join(realpathSync.native(open), 'planted'), 'the kernel reaches open/planted'); // (node's own realpathSync gets this wrong)
    assert.match(unsafeWorkspace(join(mine, ws)) ?? '', /open can be written by others \(mode 0777\)$/, ws);
  }
});

test('refused: the UTP store kept at the workspace root (airlock.db) when others can write it', () => {
  const ws = openWorkspace(join(fresh(), 'ws'));
  writeFileSync(join(ws.root, 'airlock.db'), '', { mode: 0o600 });
  assert.equal(unsafeWorkspace(ws.root), null);
  chmodSync(join(ws.root, 'airlock.db'), 0o666);
  assert.match(unsafeWorkspace(ws.root) ?? '', /airlock\.db \(mode 0666\) can be written by others$/);
});

test('attack: another user makes a folder of the way between the check and its mkdir; it is refused and nothing is made in it', { skip: !root ? 'needs root (a folder of another user)' : false }, () => {
  const d = fresh();
  chmodSync(d, 0o1777); // sticky and open to all, as /tmp
  const wsRoot = join(d, 'ws');
  const real = fs.mkdirSync;
  // The attacker wins the race deterministically: they make the folder right before our mkdir.
  const m = mock.method(fs, 'mkdirSync', (p: fs.PathLike, o?: fs.MakeDirectoryOptions) => {
    if (String(p) === wsRoot && !existsSync(wsRoot)) {
      const r = spawnSync('mkdir', ['-m', '0777', wsRoot], { uid: 65534, gid: 65534, encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
    }
    return real(p, o);
  });
  syncBuiltinESMExports();
  try {
    assert.throws(() => openWorkspace(wsRoot), (e: unknown) => e instanceof WorkspaceError && e.code === 'WS_NOT_PRIVATE' && e.message.includes(`${wsRoot} belongs to uid 65534`), 'the way is checked again once it exists');
  } finally {
    m.mock.restore();
    syncBuiltinESMExports();
  }
  assert.deepEqual(readdirSync(wsRoot), [], 'nothing made in their folder');
});

test('attack: the doors without a workspace of their own (UTP store, audit log) refuse one in another user\'s folder and make nothing', { skip: !root ? 'needs root (a folder of another user)' : false }, () => {
  const d = fresh();
  chmodSync(d, 0o711);
  const theirs = join(d, 'theirs');
  mkdirSync(theirs, { mode: 0o755 });
  chownSync(theirs, 65534, 65534);
  const ws = join(theirs, 'ws');
  mkdirSync(join(ws, 'audit'), { recursive: true, mode: 0o700 });
  for (const args of [['tools', 'list'], ['approvals', 'list'], ['audit', 'verify']]) {
    const r = airlock([...args, '--workspace', ws]);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, /^airlock: WS_NOT_PRIVATE: .*theirs belongs to uid 65534\. Airlock acts later/, args.join(' '));
  }
  assert.deepEqual(readdirSync(ws).sort(), ['audit'], 'no airlock.db made there');
});
