// A workspace another user could write, or reach by a way they could swap, is refused by every
// door (WS_NOT_PRIVATE): Airlock acts later, with its own authority, on what it keeps there.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
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
