// The operator removes a folder from scope_roots (say, after seeing what an agent tried there):
// from then on nothing of Airlock writes there. Promotion, rollback and recovery read the policy
// when they act, not the one the run was judged under.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import type { Workspace } from '../../src/workspace/workspace.js';
import { TEST_SCOPE_ROOT } from '../helpers/workspace.js';
import { auditTypes, cli, descriptor, run, snapshot, tree, workspace } from './helpers.js';

/** Sets the policy's scope_roots line (whatever it held) to `roots`. */
function setRoots(ws: Workspace, roots: string[]): void {
  const text = readFileSync(ws.policyFile, 'utf8');
  const next = text.replace(/^scope_roots: \[[^\]]*\]/m, `scope_roots: [${roots.join(', ')}]`);
  assert.notEqual(next.match(/^scope_roots: .*$/m)?.[0], undefined);
  writeFileSync(ws.policyFile, next);
}

async function promotableRun() {
  const ws = workspace();
  const root = tree({ 'a.txt': { text: 'old\n' } });
  const d = descriptor(root, {
    action_type: 'COMMAND_EXECUTION',
    effects: { filesystem: { create: [`${root}/b.txt`], modify: [`${root}/a.txt`], delete: [] }, network: false, system_state_change: false },
    command: ['/bin/sh', '-c', `echo new > ${root}/a.txt; echo added > ${root}/b.txt`],
  });
  const r = await run(ws, d);
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('; '));
  return { ws, root, r, before: snapshot(root) };
}

test('a run judged while its root was allowed is not promoted or rolled back once the root is removed (COMMIT_SCOPE_ROOT)', async () => {
  const { ws, root, r, before } = await promotableRun();
  setRoots(ws, []);
  const refused = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(refused.code, 2, refused.stdout + refused.stderr);
  assert.match(refused.stderr, new RegExp(`COMMIT_SCOPE_ROOT: ${root} is no longer under a folder the host policy lets Airlock act in \\(scope_roots: none\\): nothing was changed there`));
  assert.deepEqual(snapshot(root), before, 'the scope is untouched');

  // Another root does not cover it either; its own root back, and the promotion goes through.
  setRoots(ws, ['/srv']);
  assert.match(cli(['promote', r.sandboxId, '--workspace', ws.root]).stderr, /COMMIT_SCOPE_ROOT: .*\(scope_roots: \/srv\)/);
  setRoots(ws, [TEST_SCOPE_ROOT]);
  assert.equal(cli(['promote', r.sandboxId, '--workspace', ws.root]).code, 0);
  const promoted = snapshot(root);
  assert.notDeepEqual(promoted, before);

  setRoots(ws, []);
  const noRollback = cli(['rollback', r.sandboxId, '--workspace', ws.root]);
  assert.equal(noRollback.code, 2);
  assert.match(noRollback.stderr, /COMMIT_SCOPE_ROOT/);
  assert.deepEqual(snapshot(root), promoted);
  setRoots(ws, [TEST_SCOPE_ROOT]);
  assert.equal(cli(['rollback', r.sandboxId, '--workspace', ws.root]).code, 0);
  assert.deepEqual(snapshot(root), before);
});

test('recover leaves an interrupted promotion in a removed root as it is, says why, and finishes it once the root is back', async () => {
  const { ws, root, r, before } = await promotableRun();
  const crashed = cli(['promote', r.sandboxId, '--workspace', ws.root], { AIRLOCK_TEST_COMMIT_CRASH_AFTER: '2' });
  assert.equal(crashed.signal, 'SIGKILL');
  const mid = snapshot(root);
  assert.notDeepEqual(mid, before, 'the crash left changes on disk');

  setRoots(ws, []);
  const rec = cli(['recover', '--workspace', ws.root, '--json']);
  const rep = JSON.parse(rec.stdout);
  assert.equal(rep.recovered[0].outcome, 'failed', rec.stdout);
  assert.ok(rep.recovered[0].problems.some((p: { code: string }) => p.code === 'COMMIT_SCOPE_ROOT'), rec.stdout);
  assert.deepEqual(snapshot(root), mid, 'recover did not touch the scope');
  assert.match(cli(['promote', r.sandboxId, '--workspace', ws.root]).stderr, /COMMIT_INTERRUPTED/, 'still interrupted: nothing else may act');

  setRoots(ws, [TEST_SCOPE_ROOT]);
  const again = JSON.parse(cli(['recover', '--workspace', ws.root, '--json']).stdout);
  assert.equal(again.recovered[0].outcome, 'old_state');
  assert.deepEqual(snapshot(root), before);
  assert.ok(auditTypes(ws).some((a) => a.type === 'recovered' && a.detail?.outcome === 'old_state'));
});
