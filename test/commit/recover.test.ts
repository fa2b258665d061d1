import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { auditTypes, cli, cliAsync, descriptor, run, snapshot, tree, workspace } from './helpers.js';

/** 30 files modified, 30 added, 10 deleted by one COMMAND_EXECUTION. */
async function bigChange() {
  const ws = workspace();
  const files: Record<string, { text: string }> = {};
  for (let i = 0; i < 30; i++) files[`m${i}.txt`] = { text: `old ${i}\n` };
  for (let i = 0; i < 10; i++) files[`d${i}.log`] = { text: `log ${i}\n` };
  const root = tree(files);
  const d = descriptor(root, {
    action_type: 'COMMAND_EXECUTION',
    effects: { filesystem: { create: [`${root}/n*.txt`], modify: [`${root}/m*.txt`], delete: [`${root}/d*.log`] }, network: false, system_state_change: false },
    command: ['/bin/sh', '-c', `cd ${root} && for i in $(seq 0 29); do echo new $i > m$i.txt; echo add $i > n$i.txt; done; rm -f d*.log`],
  });
  const r = await run(ws, d);
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('; '));
  return { ws, root, r, before: snapshot(root) };
}

const changedCount = (root: string) => readdirSync(root).filter((n) => n.startsWith('n')).length + (30 - readdirSync(root).filter((n) => n.startsWith('m') && readFileSync(join(root, n), 'utf8').startsWith('old')).length);

test('kill -9 in the middle of a promotion, then `airlock recover`: the old tree exactly, and recover says so', async () => {
  const { ws, root, r, before } = await bigChange();
  const child = cliAsync(['promote', r.sandboxId, '--workspace', ws.root], { AIRLOCK_TEST_COMMIT_DELAY_MS: '40' });
  // Wait until the promotion is visibly halfway, then kill it without warning.
  const t0 = Date.now();
  while (changedCount(root) < 10 && Date.now() - t0 < 20_000) await new Promise((res) => setTimeout(res, 20));
  child.kill('SIGKILL');
  await new Promise((res) => child.on('close', res));
  const mid = changedCount(root);
  assert.ok(mid >= 10 && mid < 60, `the kill landed halfway (${mid} of 60 changes applied)`);
  assert.notDeepEqual(snapshot(root), before, 'the tree is mixed before recovery');

  // Anything else refuses until recovery.
  const blocked = cli(['rollback', r.sandboxId, '--workspace', ws.root]);
  assert.equal(blocked.code, 2);
  assert.match(blocked.stderr, /COMMIT_INTERRUPTED/);

  const rec = cli(['recover', '--workspace', ws.root, '--json']);
  assert.equal(rec.code, 0, rec.stderr);
  const rep = JSON.parse(rec.stdout);
  assert.equal(rep.recovered.length, 1);
  assert.equal(rep.recovered[0].outcome, 'old_state');
  assert.deepEqual(snapshot(root), before, 'exactly the old state: no staging file, no half change');
  assert.ok(auditTypes(ws).some((a) => a.type === 'recovered' && a.detail?.outcome === 'old_state'));

  // Recovery is idempotent, and the run can still be promoted (once) afterwards.
  assert.match(cli(['recover', '--workspace', ws.root]).stdout, /nothing was interrupted/);
  assert.equal(cli(['promote', r.sandboxId, '--workspace', ws.root]).code, 0);
  assert.equal(changedCount(root), 60);
  assert.ok(!existsSync(join(root, 'd0.log')));
});

test('kill -9 after every change but before the commit record: recover goes back; an interrupted rollback is finished', async () => {
  const { ws, root, r, before } = await bigChange();
  const crashed = cli(['promote', r.sandboxId, '--workspace', ws.root], { AIRLOCK_TEST_COMMIT_CRASH_AFTER: '70' });
  assert.equal(crashed.signal, 'SIGKILL');
  assert.equal(changedCount(root), 60, 'every change was on disk when it died');
  const rec = JSON.parse(cli(['recover', '--workspace', ws.root, '--json']).stdout);
  assert.equal(rec.recovered[0].outcome, 'old_state', 'no promoted record: the promotion did not happen');
  assert.deepEqual(snapshot(root), before);

  assert.equal(cli(['promote', r.sandboxId, '--workspace', ws.root]).code, 0);
  const promoted = snapshot(root);
  const dying = cli(['rollback', r.sandboxId, '--workspace', ws.root], { AIRLOCK_TEST_COMMIT_CRASH_AFTER: '25' });
  assert.equal(dying.signal, 'SIGKILL');
  assert.notDeepEqual(snapshot(root), promoted);
  assert.notDeepEqual(snapshot(root), before);
  const rec2 = JSON.parse(cli(['recover', '--workspace', ws.root, '--json']).stdout);
  assert.equal(rec2.recovered[0].interrupted, 'rollback');
  assert.equal(rec2.recovered[0].outcome, 'old_state');
  assert.deepEqual(snapshot(root), before, 'the rollback was finished');
  assert.deepEqual(
    auditTypes(ws).filter((a) => a.sandbox_id === r.sandboxId).map((a) => a.type),
    ['executed', 'recovered', 'promoted', 'recovered', 'rolled_back'],
  );
});

test('kill -9 right after the promoted record (the commit point): recover goes on to the new state and says so', async () => {
  const { ws, root, r } = await bigChange();
  const crashed = cli(['promote', r.sandboxId, '--workspace', ws.root], { AIRLOCK_TEST_COMMIT_CRASH_AT: 'after_commit_record' });
  assert.equal(crashed.signal, 'SIGKILL');
  const rec = JSON.parse(cli(['recover', '--workspace', ws.root, '--json']).stdout);
  assert.equal(rec.recovered[0].outcome, 'new_state');
  assert.equal(changedCount(root), 60);
  assert.ok(!existsSync(join(root, 'd0.log')));
  assert.match(cli(['promote', r.sandboxId, '--workspace', ws.root]).stdout, /already promoted/);
  assert.equal(cli(['rollback', r.sandboxId, '--workspace', ws.root]).code, 0, 'and it rolls back like any promotion');
});

test('a rollback without --force overwrites nothing the owner changes while it runs: such a path is left as the owner made it and reported', async () => {
  const { ws, root, r } = await bigChange();
  assert.equal(cli(['promote', r.sandboxId, '--workspace', ws.root]).code, 0);
  const child = cliAsync(['rollback', r.sandboxId, '--workspace', ws.root, '--json'], { AIRLOCK_TEST_COMMIT_DELAY_MS: '40' });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d));
  // Once the rollback is under way (past its conflict check), the owner edits every file it has not reached yet.
  const t0 = Date.now();
  while (changedCount(root) === 60 && Date.now() - t0 < 20_000) await new Promise((res) => setTimeout(res, 10));
  const edited = readdirSync(root).filter((n) => n.startsWith('m') && readFileSync(join(root, n), 'utf8').startsWith('new'));
  for (const n of edited) writeFileSync(join(root, n), `the owner's later edit of ${n}\n`);
  const code = await new Promise((res) => child.on('close', res));
  assert.equal(code, 0, out);
  assert.ok(edited.length > 0, 'the rollback had paths left to reach');
  for (const n of edited) assert.equal(readFileSync(join(root, n), 'utf8'), `the owner's later edit of ${n}\n`, `${n}: the owner's edit was overwritten`);
  const rep = JSON.parse(out) as { changed_meanwhile_left: string[] };
  assert.ok(rep.changed_meanwhile_left.length > 0 && rep.changed_meanwhile_left.every((p) => edited.includes(p.split('/').pop() as string)), out);
  const rolled = auditTypes(ws).find((a) => a.type === 'rolled_back');
  assert.deepEqual((rolled?.detail?.changed_meanwhile_left as string[]).sort(), [...rep.changed_meanwhile_left].sort());
});

test('a rollback without --force keeps a folder the promotion added when the owner changed a file in it meanwhile (the file left, the folder kept; no failed rollback)', async () => {
  const ws = workspace();
  const root = tree({ 'keep.txt': { text: 'k\n' } });
  const d = descriptor(root, {
    action_type: 'COMMAND_EXECUTION',
    effects: { filesystem: { create: [`${root}/**`], modify: [], delete: [] }, network: false, system_state_change: false },
    command: ['/bin/sh', '-c', `cd ${root} && mkdir d && echo f > d/f && for i in $(seq 1 20); do echo $i > z$i; done`],
  });
  const r = await run(ws, d);
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('; '));
  assert.equal(cli(['promote', r.sandboxId, '--workspace', ws.root]).code, 0);
  const child = cliAsync(['rollback', r.sandboxId, '--workspace', ws.root, '--json'], { AIRLOCK_TEST_COMMIT_DELAY_MS: '60' });
  let out = '';
  let err = '';
  child.stdout.on('data', (x: Buffer) => (out += x));
  child.stderr.on('data', (x: Buffer) => (err += x));
  const t0 = Date.now();
  while (readdirSync(root).filter((n) => n.startsWith('z')).length === 20 && Date.now() - t0 < 20_000) await new Promise((res) => setTimeout(res, 10));
  writeFileSync(join(root, 'd', 'f'), "the owner's edit\n");
  const code = await new Promise((res) => child.on('close', res));
  assert.equal(code, 0, `${out}${err}`);
  assert.equal(readFileSync(join(root, 'd', 'f'), 'utf8'), "the owner's edit\n");
  const rep = JSON.parse(out) as { changed_meanwhile_left: string[] };
  assert.deepEqual(rep.changed_meanwhile_left, [join(root, 'd', 'f')]);
  assert.deepEqual(readdirSync(root).filter((n) => n.startsWith('z')), [], 'the rest was rolled back');
  assert.match(cli(['recover', '--workspace', ws.root]).stdout, /nothing was interrupted/);
});
