import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { generateOperatorKey } from '../../src/approval/keys.js';
import { promote } from '../../src/commit/promote.js';
import { rollback } from '../../src/commit/rollback.js';
import { pruneTombstones } from '../../src/commit/tombstones.js';
import { auditTypes, cli, descriptor, run, sha, snapshot, tree, workspace } from './helpers.js';

const problemCodes = (o: { ok: boolean; problems?: { code: string }[] }) => (o.ok ? [] : (o.problems ?? []).map((p) => p.code));

test('a composite with one bad child promotes nothing; its children cannot be promoted alone', async () => {
  const ws = workspace();
  const root = tree({ 'a.log': { text: 'alpha\n' }, 'keep.txt': { text: 'keep\n' } });
  const before = snapshot(root);
  const good = descriptor(root);
  const bad = descriptor(root, {
    action_type: 'COMMAND_EXECUTION',
    effects: { filesystem: { create: [`${root}/report.txt`], modify: [], delete: [] }, network: false, system_state_change: false },
    command: ['/bin/sh', '-c', `echo r > ${root}/report.txt; echo y > ${root}/sneaky.txt`],
  });
  const composite = descriptor(root, {
    action_type: 'MULTI_STEP_COMPOSITE',
    effects: { filesystem: { create: [`${root}/report.txt`], modify: [], delete: [`${root}/**/*.log`] }, network: false, system_state_change: false },
    children: [good, bad],
  });
  const r = await run(ws, composite);
  const children = (r as unknown as { children: { sandbox_id: string; verdict: string }[] }).children;
  assert.deepEqual(children.map((c) => c.verdict), ['PROMOTE', 'BLOCK'], 'each child judged on its own');
  assert.equal(r.sandboxResult.verdict.recommended_action, 'BLOCK');
  assert.ok(r.sandboxResult.verdict.reasons.some((x) => x.startsWith('children[1]')));
  const p = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(p.code, 2);
  assert.match(p.stderr, /PROMOTE_VERDICT/);
  const alone = cli(['promote', children[0]?.sandbox_id as string, '--workspace', ws.root]);
  assert.equal(alone.code, 2);
  assert.match(alone.stderr, /PROMOTE_COMPOSITE_CHILD/);
  assert.deepEqual(snapshot(root), before, 'nothing of the composite was applied');
});

test('a good composite is promoted and rolled back as one unit', async () => {
  const ws = workspace();
  const root = tree({ 'a.log': { text: 'alpha\n' }, 'data.txt': { text: 'v1\n' } });
  const before = snapshot(root);
  const del = descriptor(root);
  const edit = descriptor(root, {
    action_type: 'COMMAND_EXECUTION',
    effects: { filesystem: { create: [], modify: [`${root}/data.txt`], delete: [] }, network: false, system_state_change: false },
    command: ['/bin/sh', '-c', `echo v2 > ${root}/data.txt`],
  });
  const composite = descriptor(root, {
    action_type: 'MULTI_STEP_COMPOSITE',
    effects: { filesystem: { create: [], modify: [`${root}/data.txt`], delete: [`${root}/**/*.log`] }, network: false, system_state_change: false },
    children: [del, edit],
  });
  const r = await run(ws, composite);
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('; '));
  assert.deepEqual(r.selfCheckProblems, []);
  assert.equal(cli(['promote', r.sandboxId, '--workspace', ws.root]).code, 0);
  assert.ok(!existsSync(join(root, 'a.log')));
  assert.equal(readFileSync(join(root, 'data.txt'), 'utf8'), 'v2\n');
  assert.equal(cli(['rollback', r.sandboxId, '--workspace', ws.root]).code, 0);
  assert.deepEqual(snapshot(root), before);
  const h = cli(['history', del.action_id as string, '--workspace', ws.root]);
  assert.match(h.stdout, /promoted: 0 added, 1 modified, 1 deleted/, 'a child\'s history shows its composite');
});

test('REQUIRE_CONFIRMATION promotes only after an operator signs this exact diff', async () => {
  const ws = workspace();
  const keys = mkdtempSync(join(tmpdir(), 'airlock-keys-'));
  const k = generateOperatorKey('alice', keys);
  assert.ok('publicKey' in k);
  const pol = readFileSync(ws.policyFile, 'utf8').replace(/^operators: \[\].*$/m, `operators:\n  - name: alice\n    public_key: "${k.publicKey}"`);
  writeFileSync(ws.policyFile, pol);
  const root = tree({ 'a.log': { text: 'alpha\n' } });
  const r = await run(ws, descriptor(root, { risk_level: 'HIGH' }));
  assert.equal(r.sandboxResult.verdict.recommended_action, 'REQUIRE_CONFIRMATION');
  const p = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(p.code, 2);
  assert.match(p.stderr, /PROMOTE_NEEDS_CONFIRMATION/);
  const unknown = cli(['confirm', r.sandboxId, '--operator', 'mallory', '--key-dir', keys, '--workspace', ws.root, '--yes']);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /CONFIRM_KEY/);
  const c = cli(['confirm', r.sandboxId, '--operator', 'alice', '--key-dir', keys, '--workspace', ws.root, '--yes']);
  assert.equal(c.code, 0, c.stderr);
  // A confirmation is bound to its diff: tampering with the stored one invalidates it.
  const cf = join(ws.runs, r.sandboxId, 'confirmation.json');
  const good = readFileSync(cf, 'utf8');
  writeFileSync(cf, good.replace(/"diff_sha256": "[0-9a-f]{64}"/, `"diff_sha256": "${sha('other')}"`));
  assert.match(cli(['promote', r.sandboxId, '--workspace', ws.root]).stderr, /CONFIRM_INVALID/);
  writeFileSync(cf, good);
  const ok = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(ok.code, 0, ok.stderr);
  assert.ok(!existsSync(join(root, 'a.log')));
  const types = auditTypes(ws).filter((a) => a.sandbox_id === r.sandboxId).map((a) => a.type);
  assert.deepEqual(types, ['executed', 'confirmed', 'promoted']);
  assert.equal(auditTypes(ws).find((a) => a.type === 'promoted')?.detail?.confirmed_by, 'alice');
});

test('cooldown_on_repeat: the same declaration cannot be promoted again before the cooldown after a rollback', async () => {
  const ws = workspace();
  const root = tree({ 'a.log': { text: 'alpha\n' } });
  const base = descriptor(root, { confirmation: { required: false, reason: '', cooldown_on_repeat: true } });
  const r1 = await run(ws, base);
  const t0 = Date.now();
  assert.ok((await promote(ws, r1.sandboxId, { now: () => new Date(t0) })).ok);
  assert.ok((await rollback(ws, r1.sandboxId, { now: () => new Date(t0) })).ok);
  // Re-issued with a new id and time: still the same action.
  const r2 = await run(ws, { ...base, action_id: randomUUID(), created_at: '2026-12-01T00:00:00Z', intent_summary: 'Again.' });
  const early = (await promote(ws, r2.sandboxId, { now: () => new Date(t0 + 60_000), cooldownSeconds: 600 }));
  assert.deepEqual(problemCodes(early), ['PROMOTE_COOLDOWN']);
  assert.ok(existsSync(join(root, 'a.log')));
  // A different declaration is not held back.
  const other = await run(ws, descriptor(root, { effects: { filesystem: { create: [], modify: [], delete: [`${root}/*.log`] }, network: false, system_state_change: false } }));
  assert.ok((await promote(ws, other.sandboxId, { now: () => new Date(t0 + 60_000), cooldownSeconds: 600 })).ok);
  assert.ok((await rollback(ws, other.sandboxId)).ok);
  const later = (await promote(ws, r2.sandboxId, { now: () => new Date(t0 + 601_000), cooldownSeconds: 600 }));
  assert.ok(later.ok, JSON.stringify(problemCodes(later)));
});

test('a FORCE_ROLLBACK verdict rolls back the live promotion of the same action without a person', async () => {
  const ws = workspace();
  const root = tree({ 'a.log': { text: 'alpha\n' } });
  const before = snapshot(root);
  const r = await run(ws, descriptor(root));
  assert.equal(cli(['promote', r.sandboxId, '--workspace', ws.root]).code, 0);
  // A later verdict on the same action (e.g. the host policy's re-judgement) says FORCE_ROLLBACK.
  const forcedId = `${r.sandboxId}-fr`;
  cpSync(join(ws.runs, r.sandboxId), join(ws.runs, forcedId), { recursive: true });
  const sr = JSON.parse(readFileSync(join(ws.runs, forcedId, 'sandbox-result.json'), 'utf8'));
  sr.sandbox_id = forcedId;
  sr.verdict = { recommended_action: 'FORCE_ROLLBACK', reasons: ['host policy: this action must be undone'] };
  writeFileSync(join(ws.runs, forcedId, 'sandbox-result.json'), JSON.stringify(sr, null, 2));
  const record = JSON.parse(readFileSync(join(ws.runs, forcedId, 'record.json'), 'utf8'));
  writeFileSync(join(ws.runs, forcedId, 'record.json'), JSON.stringify({ ...record, sandbox_id: forcedId, verdict: 'FORCE_ROLLBACK' }));
  const out = cli(['recover', '--workspace', ws.root, '--json']);
  assert.equal(out.code, 0, out.stderr);
  assert.deepEqual(JSON.parse(out.stdout).forced.map((f: { sandboxId: string; ok: boolean }) => [f.sandboxId, f.ok]), [[r.sandboxId, true]]);
  assert.deepEqual(snapshot(root), before);
  const rec = auditTypes(ws).find((a) => a.type === 'rolled_back');
  assert.equal(rec?.detail?.trigger, 'FORCE_ROLLBACK');
  assert.match(cli(['promote', forcedId, '--workspace', ws.root]).stdout, /FORCE_ROLLBACK: nothing promoted/);
});

test('preconditions are checked again at promotion: paths_exist, user_idle', async () => {
  const ws = workspace();
  const root = tree({ 'a.log': { text: 'alpha\n' }, 'flag': { text: '1' } });
  const r = await run(ws, descriptor(root, { preconditions: { paths_exist: [join(root, 'flag')] } }));
  const { unlinkSync } = await import('node:fs');
  unlinkSync(join(root, 'flag'));
  assert.deepEqual(problemCodes((await promote(ws, r.sandboxId))), ['PROMOTE_PRECONDITION_FAILED']);
  const idle = await run(ws, descriptor(root, { preconditions: { user_idle: true } }));
  assert.deepEqual(problemCodes((await promote(ws, idle.sandboxId))), ['PROMOTE_PRECONDITION_UNCHECKABLE']);
  const notIdle = await run(ws, descriptor(root, { preconditions: { user_idle: false, network_available: true } }));
  const ok = (await promote(ws, notIdle.sandboxId, { host: { defaultRoute: () => true, userIdle: () => null } }));
  assert.ok(ok.ok, JSON.stringify(problemCodes(ok)));
  assert.ok(existsSync(join(root, 'a.log')) === false);
});

test('tombstones: kept for the retention and for live promotions; pruning is audited', async () => {
  const ws = workspace();
  const root = tree({ 'a.log': { text: 'alpha\n' }, 'b.log': { text: 'beta\n' } });
  const r = await run(ws, descriptor(root));
  assert.ok((await promote(ws, r.sandboxId)).ok);
  const inDays = (d: number) => () => new Date(Date.now() + d * 86_400_000);
  const early = (await pruneTombstones(ws, 30, { now: inDays(10) }));
  assert.ok(!('ok' in early) && early.removed.length === 0, 'nothing younger than the retention goes');
  const live = (await pruneTombstones(ws, 30, { now: inDays(40) }));
  assert.ok(!('ok' in live) && live.removed.length === 0 && live.keptForRollback === 2, 'a live promotion keeps its pre-images');
  assert.ok((await rollback(ws, r.sandboxId)).ok);
  const gone = (await pruneTombstones(ws, 30, { now: inDays(40) }));
  assert.ok(!('ok' in gone) && gone.removed.length === 2);
  const rec = auditTypes(ws).find((a) => a.type === 'tombstones_pruned');
  assert.deepEqual((rec?.detail?.sha256 as string[]).sort(), [sha('alpha\n'), sha('beta\n')].sort());
});
