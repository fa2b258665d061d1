// Issue 15: the host's own writes (promotion, rollback, recovery, tombstoning, scope staging) attacked
// by the owner of the scope, as a real second uid with real processes and no test hooks.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, linkSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { promote } from '../../src/commit/promote.js';
import { recover } from '../../src/commit/recover.js';
import { rollback } from '../../src/commit/rollback.js';
import { sandboxResultContract } from '../../src/contracts/sandbox-result.js';
import { runNs } from '../../src/sandbox/ns/runner.js';
import type { Workspace } from '../../src/workspace/workspace.js';
import { repoPath } from '../helpers/paths.js';
import { TEST_SCOPE_ROOT } from '../helpers/workspace.js';
import { auditTypes, cli, descriptor, OWNER_UID, ownedTree, run, workspace } from './helpers.js';

const root = process.getuid?.() === 0;
const U = OWNER_UID;


/** A folder outside every scope that anyone could write: only Airlock's path handling can keep it clean. */
function victim(): string {
  const v = mkdtempSync(join(TEST_SCOPE_ROOT, 'victim-'));
  chmodSync(v, 0o777);
  return v;
}

const command = (scope: string, sh: string, create: string[] = [], modify: string[] = []) =>
  descriptor(scope, { action_type: 'COMMAND_EXECUTION', command: ['/bin/sh', '-c', sh], effects: { filesystem: { create, modify, delete: [] }, network: false, system_state_change: false } });

/** The racing process, as the scope's owner (test/fixtures/attacks/swap-race.py). */
function racer(real: string, link: string) {
  const p = spawn('/usr/bin/python3', [repoPath('test/fixtures/attacks/swap-race.py'), real, link], { uid: U, gid: U, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  p.stdout.on('data', (d: Buffer) => (out += d));
  p.stderr.on('data', (d: Buffer) => (out += d));
  return {
    stop: () =>
      new Promise<number>((resolve) => {
        p.on('close', () => resolve(Number(out.trim()) || 0));
        p.kill('SIGTERM');
      }),
  };
}

function auditVerify(ws: Workspace): void {
  const v = cli(['audit', 'verify', '--workspace', ws.root]);
  assert.equal(v.code, 0, v.stdout + v.stderr);
}

/** What the audit log says a run's promotion ended as: the last record that settles it. */
function stateInLog(ws: Workspace, sandboxId: string): 'new' | 'old' {
  let state: 'new' | 'old' = 'old';
  for (const r of auditTypes(ws).filter((a) => a.sandbox_id === sandboxId)) {
    if (r.type === 'promoted') state = 'new';
    else if (r.type === 'rolled_back' || r.type === 'promotion_aborted') state = 'old';
    else if (r.type === 'recovered') state = r.detail?.outcome === 'new_state' ? 'new' : 'old';
  }
  return state;
}

test('set-id and sticky bits made in a scope are BLOCKed, and promote refuses them even with a hand-edited verdict', { skip: !root }, async () => {
  const ws = workspace();
  const t = ownedTree({ 'keep.txt': 'k' });
  const r = await run(ws, command(t, `cp /bin/sh ${t}/sh && chmod 4755 ${t}/sh && mkdir ${t}/drop && chmod 3777 ${t}/drop && mkfifo ${t}/fifo`, [`${t}/sh`, `${t}/drop`, `${t}/fifo`]));
  const reasons = r.sandboxResult.verdict.reasons.join('\n');
  assert.equal(r.sandboxResult.verdict.recommended_action, 'BLOCK');
  assert.match(reasons, /FS_PRIVILEGE_BITS: .*\/sh has mode 4755 \(set-uid\)/);
  assert.match(reasons, /FS_PRIVILEGE_BITS: .*\/drop has mode 3777 \(set-gid, sticky\)/);
  assert.match(reasons, /FS_SPECIAL_FILE: .*\/fifo is a fifo/);

  // A hand-edited Sandbox Result (verdict PROMOTE, everything compliant, the fifo gone) is still refused.
  const file = join(ws.runs, r.sandboxId, 'sandbox-result.json');
  const sr = JSON.parse(readFileSync(file, 'utf8'));
  sr.verdict = { recommended_action: 'PROMOTE', reasons: ['edited'] };
  for (const k of Object.keys(sr.compliance)) sr.compliance[k] = true;
  sr.filesystem_diff.added = sr.filesystem_diff.added.filter((e: { type: string }) => e.type !== 'fifo');
  writeFileSync(file, JSON.stringify(sr, null, 2));
  assert.ok(sandboxResultContract.parse(JSON.stringify(sr)).ok, 'the forged result is itself valid');
  const p = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(p.code, 2, p.stderr);
  assert.match(p.stderr, /PROMOTE_PRIVILEGE_BITS: .*\/sh would get mode 4755/);
  assert.match(p.stderr, /PROMOTE_PRIVILEGE_BITS: .*\/drop would get mode 3777/);
  assert.deepEqual(readdirSync(t).sort(), ['keep.txt'], 'nothing was applied');
});

test('a device node cannot come out of a scope: mknod fails in the sandbox, and promote refuses a forged one', { skip: !root }, async () => {
  const ws = workspace();
  const t = ownedTree({ 'keep.txt': 'k' });
  const r = await run(ws, command(t, `mknod ${t}/null c 1 3; mknod ${t}/disk b 8 0; echo made > ${t}/made`, [`${t}/null`, `${t}/disk`, `${t}/made`]));
  assert.deepEqual(r.sandboxResult.filesystem_diff.added.map((e) => e.path), [`${t}/made`], 'no device node was made');
  // A forged result that claims one (verdict PROMOTE, all compliant) is refused by promotion itself.
  const file = join(ws.runs, r.sandboxId, 'sandbox-result.json');
  const sr = JSON.parse(readFileSync(file, 'utf8'));
  sr.verdict = { recommended_action: 'PROMOTE', reasons: ['edited'] };
  for (const k of Object.keys(sr.compliance)) sr.compliance[k] = true;
  sr.filesystem_diff.added.push({ path: `${t}/null`, type: 'char_device', mode: '0666', size_bytes: 0 });
  writeFileSync(file, JSON.stringify(sr, null, 2));
  const p = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(p.code, 2, p.stderr);
  assert.match(p.stderr, /PROMOTE_UNSUPPORTED_ENTRY: .*\/null is a char_device: only regular files and directories are promoted/);
  assert.deepEqual(readdirSync(t), ['keep.txt']);
});

test('a change to a file of another owner in the scope is BLOCKed, and promote refuses it even with a hand-edited verdict', { skip: !root }, async () => {
  const ws = workspace();
  const t = ownedTree({ 'mine.txt': 'mine\n' });
  writeFileSync(join(t, 'roots.txt'), 'root\n'); // root's file in U's scope
  chmodSync(join(t, 'roots.txt'), 0o666);
  const r = await run(ws, command(t, `echo x >> ${t}/roots.txt`, [], [`${t}/roots.txt`]));
  assert.equal(r.sandboxResult.verdict.recommended_action, 'BLOCK');
  assert.match(r.sandboxResult.verdict.reasons.join('\n'), /FS_FOREIGN_OWNER: modified .*\/roots.txt, owned by uid 0, not by the scope's owner \(uid 4242\)/);
  const file = join(ws.runs, r.sandboxId, 'sandbox-result.json');
  const sr = JSON.parse(readFileSync(file, 'utf8'));
  sr.verdict = { recommended_action: 'PROMOTE', reasons: ['edited'] };
  for (const k of Object.keys(sr.compliance)) sr.compliance[k] = true;
  writeFileSync(file, JSON.stringify(sr, null, 2));
  const p = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(p.code, 2, p.stderr);
  assert.match(p.stderr, /PROMOTE_FOREIGN_OWNER: .*\/roots.txt belongs to uid 0/);
  assert.equal(readFileSync(join(t, 'roots.txt'), 'utf8'), 'root\n');
});

test('promotion writes as the scope owner, and a link planted in the scope after the run stops it before anything is written', { skip: !root }, async () => {
  const ws = workspace();
  const t = ownedTree({ 'sub/keep.txt': 'k' });
  const v = victim();
  const r = await run(ws, command(t, `echo a > ${t}/top.txt; echo b > ${t}/sub/ld.so.preload`, [`${t}/top.txt`, `${t}/sub/*`]));
  assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('\n'));
  // The owner moves sub away and puts a link to the victim folder in its place.
  renameSync(join(t, 'sub'), join(t, 'sub.real'));
  symlinkSync(v, join(t, 'sub'));
  const p = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(p.code, 2, p.stderr);
  assert.match(p.stderr, /PROMOTE_PATH_UNSAFE: .*\/sub\/ld.so.preload: its parent .*\/sub is a symbolic link/);
  assert.deepEqual(readdirSync(v), [], 'nothing written through the link');
  assert.ok(!existsSync(join(t, 'top.txt')), 'all or nothing: not even the safe file');
  // Put back, the same run promotes, and what it creates belongs to the scope's owner, not root.
  rmSync(join(t, 'sub'));
  renameSync(join(t, 'sub.real'), join(t, 'sub'));
  const ok = cli(['promote', r.sandboxId, '--workspace', ws.root]);
  assert.equal(ok.code, 0, ok.stderr);
  const st = spawnSync('stat', ['-c', '%u:%g %a', join(t, 'top.txt'), join(t, 'sub', 'ld.so.preload')], { encoding: 'utf8' }).stdout.trim().split('\n');
  assert.deepEqual(st, [`${U}:${U} 644`, `${U}:${U} 644`]);
  auditVerify(ws);
});

test('a racing owner swapping a scope directory for a link during hundreds of promotion attempts never gets a write outside the scope; each run ends old or new, as the audit log says', { skip: !root, timeout: 600_000 }, async (tc) => {
  const ws = workspace();
  const t = ownedTree({ 'sub/keep.txt': 'k' });
  const v = victim();
  const RUNS = 60;
  const FILES = 30;
  const runs: string[] = [];
  for (let i = 0; i < RUNS; i++) {
    const r = await run(ws, command(t, `i=0; while [ $i -lt ${FILES} ]; do echo r${i}-$i > ${t}/sub/r${i}-$i; i=$((i+1)); done`, [`${t}/sub/*`]));
    assert.equal(r.sandboxResult.verdict.recommended_action, 'PROMOTE', r.sandboxResult.verdict.reasons.join('\n'));
    runs.push(r.sandboxId);
  }
  symlinkSync(v, join(t, 'sub-link'));
  chownSync(join(t, 'sub-link'), U, U);
  const race = racer(join(t, 'sub'), join(t, 'sub-link'));
  let attempts = 0;
  const outcomes: Record<string, number> = {};
  const count = (k: string) => (outcomes[k] = (outcomes[k] ?? 0) + 1);
  const pending = new Set(runs);
  try {
    while (pending.size > 0 && attempts < 600) {
      for (const id of [...pending]) {
        attempts++;
        const out = await promote(ws, id);
        if (out.ok) {
          pending.delete(id);
          count('promoted');
          continue;
        }
        const codes = out.problems.map((p) => p.code);
        count(codes[0] ?? '?');
        if (codes.includes('COMMIT_INTERRUPTED')) {
          const rec = await recover(ws); // also under the race; a failed one is tried again next time
          count(!('recovered' in rec) ? 'recover-refused' : rec.recovered.every((x) => x.outcome !== 'failed') ? 'recovered' : 'recover-failed');
        }
      }
    }
  } finally {
    const swaps = await race.stop();
    tc.diagnostic(`race: ${swaps} swaps during ${attempts} promotion attempts: ${JSON.stringify(outcomes)}`);
    assert.ok(swaps >= 300, `the racer swapped only ${swaps} times`);
  }
  const final = await recover(ws);
  assert.ok('recovered' in final && final.recovered.every((x) => x.outcome !== 'failed'), JSON.stringify(final));
  // The race's pressure is how often it made a promotion refuse, not how many attempts that took
  // (on a busy host the racer swaps less often and the runs are promoted sooner): every run was
  // attempted twice at least, and the race made RUNS / 2 attempts refuse at least.
  const hits = (outcomes.PROMOTE_PATH_UNSAFE ?? 0) + (outcomes.PROMOTE_PATH_CHANGED ?? 0);
  assert.ok(attempts >= 2 * RUNS, `only ${attempts} attempts`);
  assert.ok(hits >= RUNS / 2, `the race hit only ${hits} times: ${JSON.stringify(outcomes)}`);
  assert.deepEqual(readdirSync(v), [], 'nothing was ever written outside the scope');
  const present = new Set(readdirSync(join(t, 'sub')));
  for (const [i, id] of runs.entries()) {
    const have = Array.from({ length: FILES }, (_, j) => present.has(`r${i}-${j}`));
    assert.ok(have.every(Boolean) || !have.some(Boolean), `run ${i} is half applied`);
    assert.equal(have[0] ? 'new' : 'old', stateInLog(ws, id), `run ${i}: the tree and the audit log disagree`);
  }
  auditVerify(ws);
});

test('the same race against rollback --force and against recover of a promotion killed mid-way: nothing outside the scope, old or new state as the log says', { skip: !root, timeout: 600_000 }, async (tc) => {
  const ws = workspace();
  const t = ownedTree({ 'sub/keep.txt': 'k' });
  const v = victim();
  const FILES = 40;
  const ids: string[] = [];
  for (let i = 0; i < 12; i++) {
    const r = await run(ws, command(t, `i=0; while [ $i -lt ${FILES} ]; do echo r${i}-$i > ${t}/sub/r${i}-$i; i=$((i+1)); done`, [`${t}/sub/*`]));
    ids.push(r.sandboxId);
  }
  symlinkSync(v, join(t, 'sub-link'));
  chownSync(join(t, 'sub-link'), U, U);
  let attempts = 0;
  let swaps = 0;
  const outcomes: Record<string, number> = {};
  const count = (k: string) => (outcomes[k] = (outcomes[k] ?? 0) + 1);
  const inflight = () => readdirSync(join(ws.root, 'promotions', 'inflight')).length > 0;
  /** Recovers under the race until nothing is in flight. */
  const recoverRacing = async () => {
    const race = racer(join(t, 'sub'), join(t, 'sub-link'));
    try {
      for (let k = 0; k < 200 && inflight(); k++) {
        attempts++;
        const rec = await recover(ws);
        count('recovered' in rec ? (rec.recovered.some((x) => x.outcome === 'failed') ? 'recover-failed' : 'recover-ok') : 'recover-refused');
      }
    } finally {
      swaps += await race.stop();
    }
  };
  // Half are promoted calmly; the other half by a real `airlock promote` killed -9 mid-way, each
  // then recovered while the owner races.
  for (const id of ids.slice(0, 6)) assert.ok((await promote(ws, id)).ok);
  let killedMidway = 0;
  for (const id of ids.slice(6)) {
    const p = spawn(repoPath('bin/airlock'), ['promote', id, '--workspace', ws.root], { stdio: 'ignore' });
    let done = false;
    const closed = new Promise((r) => p.on('close', () => r((done = true))));
    // Killed as soon as it has started to apply (its in-flight marker exists), plus 0-4 ms.
    const marker = join(ws.root, 'promotions', 'inflight', id);
    while (!done && !existsSync(marker)) await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, Math.random() * 4));
    p.kill('SIGKILL');
    await closed;
    if (!inflight()) continue;
    killedMidway++;
    await recoverRacing();
  }
  assert.ok(killedMidway >= 3, `only ${killedMidway} promotions were caught mid-way`);
  // Then rollback --force of every live promotion, under the race, until none is live.
  const race = racer(join(t, 'sub'), join(t, 'sub-link'));
  try {
    const live = () => ids.filter((id) => stateInLog(ws, id) === 'new');
    for (let k = 0; k < 300 && live().length > 0; k++) {
      for (const id of live()) {
        attempts++;
        const out = await rollback(ws, id, { force: true });
        count(out.ok ? 'rolled-back' : (out.problems[0]?.code ?? '?'));
        if (inflight()) await recover(ws);
      }
    }
  } finally {
    swaps += await race.stop();
    tc.diagnostic(`race: ${swaps} swaps during ${attempts} recover/rollback attempts (${killedMidway} promotions killed mid-way): ${JSON.stringify(outcomes)}`);
  }
  const final = await recover(ws);
  assert.ok('recovered' in final && final.recovered.every((x) => x.outcome !== 'failed'), JSON.stringify(final));
  assert.deepEqual(readdirSync(v), [], 'nothing was ever written outside the scope');
  const present = new Set(readdirSync(join(t, 'sub')));
  for (const [i, id] of ids.entries()) {
    const have = Array.from({ length: FILES }, (_, j) => present.has(`r${i}-${j}`));
    assert.ok(have.every(Boolean) || !have.some(Boolean), `run ${i} is half applied`);
    assert.equal(have[0] ? 'new' : 'old', stateInLog(ws, id), `run ${i}: the tree and the audit log disagree`);
  }
  auditVerify(ws);
});

test('a one-file scope through a linked parent, or on a file its owner cannot read, is refused before anything runs', { skip: !root }, async () => {
  const ws = workspace();
  const t = ownedTree({ 'notes.txt': 'mine\n' });
  symlinkSync('/etc', join(t, 'etc-link'));
  const read = (path: string) => descriptor(path, { action_type: 'FILE_READ', scope: { filesystem: { paths: [path], recursive: false }, network: { required: false }, ui: { required: false } }, effects: { filesystem: { create: [], modify: [], delete: [] }, network: false, system_state_change: false } });
  const file = join(t, '..', `${t.split('/').pop()}-read.json`);
  writeFileSync(file, JSON.stringify(read(join(t, 'etc-link', 'shadow'))));
  const viaLink = cli(['run', file, '--workspace', ws.root]);
  assert.equal(viaLink.code, 2, viaLink.stderr);
  assert.match(viaLink.stderr, /POLICY_SCOPE_LINK: scope .*\/etc-link\/shadow goes through a symbolic link \(.*\/etc-link -> \/etc\)/);
  // Past the policy (the link planted after it looked), the runner's agent refuses it too.
  const o = await runNs({ argv: ['/bin/cat', join(t, 'etc-link', 'shadow')], outDir: mkdtempSync(join(ws.root, 'out-')), scopes: [{ hostPath: join(t, 'etc-link', 'shadow') }], limits: { wallMs: 10_000, cpuMs: 5_000, memoryBytes: 256 << 20, pids: 16, outBytes: 1 << 20, tmpBytes: 1 << 20, files: 1000, stdoutBytes: 1 << 20, stderrBytes: 1 << 20 } });
  assert.deepEqual(o.problems.map((p) => p.code), ['NS_SCOPE_UNSAFE']);
  assert.equal(o.stdout.bytes.length, 0);
  // A file in U's folder that U cannot read (root's, 0600): the sandbox may not read it either.
  writeFileSync(join(t, 'secret'), 'root only\n', { mode: 0o600 });
  writeFileSync(file, JSON.stringify(read(join(t, 'secret'))));
  const unreadable = cli(['run', file, '--workspace', ws.root]);
  assert.equal(unreadable.code, 2, unreadable.stderr);
  assert.match(unreadable.stderr, /NS_SCOPE_UNREADABLE: scope .*\/secret: its owner \(uid 4242\) cannot read it/);
  // Its own readable file: read as usual.
  writeFileSync(file, JSON.stringify(read(join(t, 'notes.txt'))));
  const ok = cli(['run', file, '--workspace', ws.root, '--json']);
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal(JSON.parse(ok.stdout).outputs.stdout.text, 'mine\n');
});

test('hard links in a scope are reported as what they are, and the Sandbox Result stays valid', { skip: !root }, async () => {
  const ws = workspace();
  const t = ownedTree({ 'a.txt': 'shared\n', 'other/x': 'x' });
  linkSync(join(t, 'a.txt'), join(t, 'b.txt')); // two names, one inode, in the real scope
  const outside = ownedTree();
  linkSync(join(t, 'other', 'x'), join(outside, 'x-elsewhere'));
  const d = descriptor(t, { action_type: 'COMMAND_EXECUTION', command: ['/bin/sh', '-c', `rm ${t}/a.txt ${t}/other/x; ln ${t}/b.txt ${t}/c.txt`], effects: { filesystem: { create: [`${t}/c.txt`], modify: [`${t}/b.txt`], delete: [`${t}/a.txt`, `${t}/other/x`] }, network: false, system_state_change: false } });
  const file = join(t, '..', `${t.split('/').pop()}-links.json`);
  writeFileSync(file, JSON.stringify(d));
  const r = cli(['run', file, '--workspace', ws.root, '--json']);
  assert.equal(r.code, 0, r.stderr); // a valid Sandbox Result (was exit 3: SR_PATH_NOT_ABSOLUTE)
  const sr = JSON.parse(r.stdout);
  assert.ok(sandboxResultContract.parse(r.stdout).ok);
  const entries = [...sr.filesystem_diff.added, ...sr.filesystem_diff.modified, ...sr.filesystem_diff.deleted];
  const x = entries.find((e: { path: string }) => e.path === `${t}/other/x`);
  assert.equal(x?.type, 'hardlink');
  assert.equal(x?.link_count, 2, 'its other name is outside the scope: counted, not named');
  const c = entries.find((e: { path: string }) => e.path === `${t}/c.txt`);
  assert.equal(c?.type, 'hardlink');
  assert.equal(c?.link_target, `${t}/b.txt`, 'its other name is in the diff: named');
  assert.equal(sr.verdict.recommended_action, 'BLOCK');
});
