// Review of the idmapped scope overlays: a scope writer that falls back to the sandbox user's uid
// (own-gid: shared with every other such run) says so where an operator of `airlock exec` / `run` /
// `serve` reads it: the Sandbox Result's verdict reasons (JG_SHARED_UID, a note that changes no verdict).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { airlock } from '../helpers/cli.js';
import { dedicatedSandboxUser } from '../helpers/sandbox-user.js';
import { scopedWorkspace, TEST_SCOPE_ROOT } from '../helpers/workspace.js';

const root = process.getuid?.() === 0;

test('airlock exec --rw on a scope that cannot be idmapped: the result says the run shared the sandbox user\'s uid, and why', { skip: !root ? 'needs root' : false, timeout: 120_000 }, (t) => {
  const u = dedicatedSandboxUser();
  const ws = scopedWorkspace();
  const scope = mkdtempSync(join(TEST_SCOPE_ROOT, 'idmap-fallback-'));
  assert.equal(spawnSync('mount', ['-t', 'ramfs', '-o', 'mode=0755', 'none', scope]).status, 0); // no idmapped mounts (as NFS, FUSE)
  t.after(() => {
    spawnSync('umount', [scope]);
    rmSync(scope, { recursive: true, force: true });
  });
  chownSync(scope, u.uid, u.gid);
  writeFileSync(join(scope, 'f.txt'), 'x\n');
  chownSync(join(scope, 'f.txt'), u.uid, u.gid);
  const r = airlock(['exec', '--workspace', ws.root, '--json', '--rw', scope, '--', 'sh', '-c', `echo y >> ${scope}/f.txt`]);
  assert.equal(r.code, 0, r.stderr);
  const id = (JSON.parse(r.stdout) as { sandbox_id: string }).sandbox_id;
  const said = [r.stdout, ...readdirSync(join(ws.runs, id)).map((f) => readFileSync(join(ws.runs, id, f), 'utf8'))].join('\n');
  assert.ok(/own-gid|idmapped/.test(said), 'nothing an operator reads says this run had the sandbox user\'s (shared) uid');
  const reasons = (JSON.parse(readFileSync(join(ws.runs, id, 'sandbox-result.json'), 'utf8')) as { verdict: { reasons: string[] } }).verdict.reasons;
  assert.ok(reasons.some((r) => /^JG_SHARED_UID: the sandbox had the sandbox user's uid \d+, shared with other runs .*idmapped/.test(r)), JSON.stringify(reasons));
});
