import assert from 'node:assert/strict';
import { chmodSync, existsSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { auditTypes, cli, descriptor, run, sha, snapshot, tree, workspace } from './helpers.js';

test('FILE_DELETE of *.log promoted then rolled back restores every byte, mode and mtime', async () => {
  const ws = workspace();
  const root = tree({ 'a.log': { text: 'alpha\n', mode: 0o640 }, 'sub/b.log': { text: 'beta '.repeat(1000), mode: 0o604 }, 'keep.txt': { text: 'keep\n' } });
  utimesSync(join(root, 'a.log'), 1_000_000, 1_000_000);
  const before = snapshot(root);
  const mtime = statSync(join(root, 'a.log')).mtimeMs;
  const r = await run(ws, descriptor(root));
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('; '));

  const p = cli(['promote', r.sandboxId, '--workspace', ws.root, '--json']);
  assert.equal(p.code, 0, p.stderr);
  assert.equal(JSON.parse(p.stdout).status, 'promoted');
  assert.ok(!existsSync(join(root, 'a.log')) && !existsSync(join(root, 'sub/b.log')), 'the logs are deleted for real');
  assert.equal(readFileSync(join(root, 'keep.txt'), 'utf8'), 'keep\n');
  assert.ok(existsSync(join(ws.tombstones, sha('alpha\n'))), 'the deleted content is in the tombstone store');

  const b = cli(['rollback', r.sandboxId, '--workspace', ws.root]);
  assert.equal(b.code, 0, b.stderr);
  assert.deepEqual(snapshot(root), before, 'every byte and mode is back');
  assert.equal(statSync(join(root, 'a.log')).mtimeMs, mtime, 'the restored file keeps its mtime');

  const types = auditTypes(ws).filter((a) => a.sandbox_id === r.sandboxId).map((a) => a.type);
  assert.deepEqual(types, ['executed', 'promoted', 'rolled_back'], 'the run itself is in the log too (door cli)');
  const rec = auditTypes(ws).find((a) => a.type === 'promoted');
  assert.equal(rec?.detail?.diff_sha256 !== undefined, true, 'the audit record carries the diff hash');

  const h = cli(['history', r.sandboxResult.action_id, '--workspace', ws.root]);
  assert.equal(h.code, 0, h.stderr);
  assert.match(h.stdout, /promoted: 0 added, 0 modified, 2 deleted/);
  assert.match(h.stdout, /rolled back: 0 added, 0 modified, 2 deleted/);
});

test('a COMMAND_EXECUTION that writes more than it declared is BLOCKed and cannot be promoted', async () => {
  const ws = workspace();
  const root = tree({ 'keep.txt': { text: 'keep\n' } });
  const before = snapshot(root);
  const d = descriptor(root, {
    action_type: 'COMMAND_EXECUTION',
    effects: { filesystem: { create: [`${root}/report.txt`], modify: [], delete: [] }, network: false, system_state_change: false },
    command: ['/bin/sh', '-c', `echo r > ${root}/report.txt; echo y > ${root}/sneaky.txt`],
  });
  const r = await run(ws, d);
  assert.equal(r.sandboxResult.verdict.recommended_action, 'BLOCK');
  const p = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(p.code, 2);
  assert.match(p.stderr, /PROMOTE_VERDICT/);
  assert.deepEqual(snapshot(root), before, 'nothing applied');
  assert.ok(!existsSync(join(ws.root, 'promotions', r.sandboxId)), 'no promotion record');
});

test('a pre-image changed after the run stops the whole promotion and names the file', async () => {
  const ws = workspace();
  const root = tree({ 'a.log': { text: 'alpha\n' }, 'b.log': { text: 'beta\n' } });
  const r = await run(ws, descriptor(root));
  writeFileSync(join(root, 'b.log'), 'beta, edited after the run\n');
  const p = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(p.code, 2);
  assert.match(p.stderr, new RegExp(`PROMOTE_PREIMAGE_CHANGED: ${join(root, 'b.log')} changed since the run`));
  assert.ok(existsSync(join(root, 'a.log')), 'a.log (unchanged) was not deleted either: all or nothing');
  // Fixing the file makes the same run promotable: a refusal leaves no record behind.
  writeFileSync(join(root, 'b.log'), 'beta\n');
  assert.equal(cli(['promote', r.sandboxId, '--workspace', ws.root]).code, 0);
  assert.ok(!existsSync(join(root, 'a.log')) && !existsSync(join(root, 'b.log')));
});

test('promoting twice applies once, also when two promotions race', async () => {
  const ws = workspace();
  const root = tree({ 'a.log': { text: 'alpha\n' }, 'keep.txt': { text: 'k\n' } });
  const r = await run(ws, descriptor(root));
  const { cliAsync } = await import('./helpers.js');
  const procs = [0, 1, 2].map(() => cliAsync(['promote', r.sandboxId, '--workspace', ws.root, '--json']));
  const outs = await Promise.all(
    procs.map(
      (p) =>
        new Promise<{ code: number | null; out: string }>((res) => {
          let out = '';
          p.stdout.on('data', (c: Buffer) => (out += c.toString()));
          p.on('close', (code) => res({ code, out }));
        }),
    ),
  );
  assert.deepEqual(outs.map((o) => o.code), [0, 0, 0]);
  const statuses = outs.map((o) => JSON.parse(o.out).status).sort();
  assert.deepEqual(statuses, ['already_promoted', 'already_promoted', 'promoted']);
  const again = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.match(again.stdout, /already promoted/);
  assert.equal(auditTypes(ws).filter((a) => a.type === 'promoted').length, 1, 'one promoted record');
});

test('rollback after a later edit refuses without --force, naming the file; --force keeps the newer version as a tombstone', async () => {
  const ws = workspace();
  const root = tree({ 'data.txt': { text: 'v1\n' } });
  const d = descriptor(root, {
    action_type: 'COMMAND_EXECUTION',
    effects: { filesystem: { create: [`${root}/new.txt`], modify: [`${root}/data.txt`], delete: [] }, network: false, system_state_change: false },
    command: ['/bin/sh', '-c', `echo v2 > ${root}/data.txt; echo n > ${root}/new.txt`],
  });
  const before = snapshot(root);
  const r = await run(ws, d);
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('; '));
  assert.equal(cli(['promote', r.sandboxId, '--workspace', ws.root]).code, 0);
  assert.equal(readFileSync(join(root, 'data.txt'), 'utf8'), 'v2\n');
  assert.equal(statSync(join(root, 'data.txt')).mode & 0o777, 0o666, 'the modified file keeps its mode');
  writeFileSync(join(root, 'data.txt'), 'v3 by a person\n');

  const refused = cli(['rollback', r.sandboxId, '--workspace', ws.root]);
  assert.equal(refused.code, 2);
  assert.match(refused.stderr, new RegExp(`ROLLBACK_CONFLICT: ${join(root, 'data.txt')} changed since the promotion`));
  assert.equal(readFileSync(join(root, 'data.txt'), 'utf8'), 'v3 by a person\n', 'nothing was changed');
  assert.ok(existsSync(join(root, 'new.txt')));

  const forced = cli(['rollback', r.sandboxId, '--workspace', ws.root, '--force']);
  assert.equal(forced.code, 0, forced.stderr);
  assert.deepEqual(snapshot(root), before);
  assert.equal(readFileSync(join(ws.tombstones, sha('v3 by a person\n')), 'utf8'), 'v3 by a person\n', 'the newer version is kept');
  const rec = auditTypes(ws).find((a) => a.type === 'rolled_back');
  assert.equal(rec?.detail?.forced, true);
});

test('modes are applied exactly: an added file gets the mode the run gave it', async () => {
  const ws = workspace();
  const root = tree({ 'x.txt': { text: 'x\n' } });
  chmodSync(join(root, 'x.txt'), 0o666);
  const d = descriptor(root, {
    action_type: 'COMMAND_EXECUTION',
    effects: { filesystem: { create: [`${root}/tool.sh`, `${root}/out`, `${root}/out/r.txt`], modify: [], delete: [] }, network: false, system_state_change: false },
    command: ['/bin/sh', '-c', `printf 'echo hi\\n' > ${root}/tool.sh; chmod 750 ${root}/tool.sh; mkdir -m 705 ${root}/out; echo r > ${root}/out/r.txt`],
  });
  const r = await run(ws, d);
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('; '));
  const before = snapshot(root);
  assert.equal(cli(['promote', r.sandboxId, '--workspace', ws.root]).code, 0);
  assert.equal(statSync(join(root, 'tool.sh')).mode & 0o7777, 0o750);
  assert.equal(statSync(join(root, 'out')).mode & 0o7777, 0o705);
  assert.equal(readFileSync(join(root, 'out/r.txt'), 'utf8'), 'r\n');
  assert.equal(statSync(join(root, 'tool.sh')).uid, statSync(root).uid, 'a new file belongs to the owner of its directory');
  assert.equal(cli(['rollback', r.sandboxId, '--workspace', ws.root]).code, 0);
  assert.deepEqual(snapshot(root), before, 'rollback removes what the promotion added, directories included');
});
