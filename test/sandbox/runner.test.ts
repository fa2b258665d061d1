// The ns runner on honest programs and on resource limits (real bwrap, real processes).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { doctor } from '../../src/sandbox/doctor.js';
import { sandboxIdle, validateSpec } from '../../src/sandbox/ns/runner.js';
import { removeRunFolder, stagingBase } from '../../src/sandbox/ns/staging.js';
import { freshOut, LIMITS, py, run, text } from './helpers-ns.js';
import { RUN_ID_RANGE } from '../../src/sandbox/run-ids.js';

const sha = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex');

test('honest path: a Python script reads /in and writes /out with the right sha256s', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-ns-in-'));
  writeFileSync(join(dir, 'data.txt'), 'hello airlock\n');
  const o = await py("d=open('/in/data.txt','rb').read(); open('/out/upper.txt','wb').write(d.upper()); print(len(d))", { inputs: [{ hostPath: join(dir, 'data.txt'), name: 'data.txt' }] });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.stdout.bytes.toString(), '14\n');
  assert.deepEqual(o.inputs, [{ name: 'data.txt', sha256: sha('hello airlock\n'), bytes: 14 }]);
  const added = o.fs.out?.find((c) => c.path === '/out/upper.txt');
  assert.equal(added?.change, 'added');
  assert.equal(added?.sha256After, sha('HELLO AIRLOCK\n'));
  assert.equal(o.resources.networkBytesOut, 0);
  assert.ok(o.resources.cpuUserMs !== null && o.resources.peakMemoryBytes !== null && o.resources.peakMemoryBytes > 0);
  if (process.getuid?.() === 0) {
    // A uid and gid of its own (run-ids.ts), not the sandbox user's shared one.
    assert.equal(o.host.hostIds, 'own', JSON.stringify(o.host));
    assert.ok(o.host.hostUid >= RUN_ID_RANGE.first && o.host.hostUid < RUN_ID_RANGE.first + RUN_ID_RANGE.count, String(o.host.hostUid));
  }
});

test('honest path: a Node script reads /in and writes /out, copied to outDir', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-ns-in-'));
  writeFileSync(join(dir, 'n.json'), '{"n":41}');
  const outDir = join(dir, 'result');
  const o = await run(['node', '-e', "const fs=require('fs');const v=JSON.parse(fs.readFileSync('/in/n.json'));fs.writeFileSync('/out/r.json',JSON.stringify({n:v.n+1}))"], { inputs: [{ hostPath: join(dir, 'n.json'), name: 'n.json' }], outDir });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.fs.out?.find((c) => c.path === '/out/r.json')?.sha256After, sha('{"n":42}'));
  assert.equal(readFileSync(join(outDir, 'r.json'), 'utf8'), '{"n":42}');
});

test('the environment is the documented allowlist plus safe spec vars, nothing of the host', async () => {
  process.env.AIRLOCK_FAKE_SECRET = 'sk-live-THIS-MUST-NOT-LEAK';
  const o = await run(['/usr/bin/env'], { env: { MY_FLAG: '1' } });
  delete process.env.AIRLOCK_FAKE_SECRET;
  assert.equal(o.status, 'SUCCESS', text(o));
  const names = o.stdout.bytes.toString().trim().split('\n').map((l) => l.split('=')[0]).sort();
  assert.deepEqual(names, ['HOME', 'LANG', 'MY_FLAG', 'PATH', 'PWD', 'PYTHONDONTWRITEBYTECODE', 'TMPDIR']);
  assert.ok(!o.stdout.bytes.toString().includes('sk-live'));
});

test('spec validation refuses bad specs before anything runs', async () => {
  const bad = validateSpec({ argv: [], outDir: 'rel', limits: { ...LIMITS, pids: 0 }, inputs: [{ hostPath: '/x', name: '../x' }], scopes: [{ hostPath: '/usr/lib' }], env: { LD_PRELOAD: 'x', PATH: '/' } });
  const codes = new Set(bad.map((p) => p.code));
  for (const c of ['NS_ARGV_EMPTY', 'NS_OUTDIR', 'NS_LIMIT_INVALID', 'NS_INPUT_NAME', 'NS_SCOPE_RESERVED', 'NS_ENV_FORBIDDEN', 'NS_ENV_RESERVED']) assert.ok(codes.has(c), c);
  const o = await run(['no-such-program-xyz']);
  assert.equal(o.status, 'SANDBOX_ERROR');
  assert.equal(o.problems[0]?.code, 'NS_ARGV_NOT_FOUND');
});

test('an absolute program the sandbox lacks, or cannot execute, ends as a shell says (127, 126): a FAILURE, not a host error', async () => {
  const missing = await run(['/no/such/program']);
  assert.equal(missing.status, 'FAILURE', text(missing));
  assert.equal(missing.exit.code, 127);
  assert.match(missing.reason, /\/no\/such\/program could not be executed in the sandbox \(No such file or directory\)/);
  const folder = await run(['/usr']);
  assert.equal(folder.status, 'FAILURE', text(folder));
  assert.equal(folder.exit.code, 126);
});

test('a run folder that could not be made stops the run before anything starts (NS_OUTDIR, no program, no /out folder)', async () => {
  const parent = Promise.reject(Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' }));
  const outDir = join(mkdtempSync(join(tmpdir(), 'airlock-ns-test-')), 'run', 'out');
  const o = await run(['/bin/sh', '-c', 'echo ran'], { outDir, outDirParent: parent });
  assert.equal(o.status, 'SANDBOX_ERROR', text(o));
  assert.equal(o.problems[0]?.code, 'NS_OUTDIR');
  assert.match(o.reason, /cannot make the folder of .*EACCES.*nothing ran/);
  assert.equal(o.exit.source, 'none', 'no process was started');
  assert.equal(o.stdout.bytes.length, 0);
  await sandboxIdle();
  assert.equal(existsSync(outDir), false, 'no /out folder was made under a parent that failed');
});

test('/out on the host: none for an empty /out; a used folder or a link there is refused before anything starts', async () => {
  const empty = freshOut();
  const e = await run(['/bin/true'], { outDir: empty });
  assert.equal(e.status, 'SUCCESS', text(e));
  assert.equal(existsSync(empty), false, 'no folder for an empty /out');

  const used = freshOut();
  mkdirSync(used);
  writeFileSync(join(used, 'old'), 'x');
  const victim = mkdtempSync(join(tmpdir(), 'airlock-ns-victim-'));
  const link = freshOut();
  symlinkSync(victim, link);
  for (const outDir of [used, link]) {
    const o = await run(['/bin/sh', '-c', 'echo ran > /out/x'], { outDir });
    assert.equal(o.problems[0]?.code, 'NS_OUTDIR', text(o));
    assert.equal(o.exit.source, 'none', 'no process was started');
  }
  assert.deepEqual(readdirSync(used), ['old']);
  assert.deepEqual(readdirSync(victim), [], 'nothing was written through the link');
  await sandboxIdle();
});

test('flooding stdout: capped, truncated, counted and hashed in full, the run completes', async () => {
  const o = await run(['/bin/sh', '-c', 'head -c 3000000 /dev/zero'], { limits: { stdoutBytes: 1000 } });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.stdout.bytes.length, 1000);
  assert.equal(o.stdout.totalBytes, 3_000_000);
  assert.equal(o.stdout.truncated, true);
  assert.equal(o.stdout.sha256, sha(Buffer.alloc(3_000_000)));
});

test('sleeping past the wall time is a TIMEOUT', async () => {
  const t = Date.now();
  const o = await run(['/bin/sleep', '10'], { limits: { wallMs: 300 } });
  assert.equal(o.status, 'TIMEOUT', text(o));
  assert.ok(o.limitsExceeded.includes('wallMs'));
  assert.ok(Date.now() - t < 3000);
});

test('a CPU spin is killed at the CPU limit (RESOURCE_KILLED, cpu)', async () => {
  const o = await run(['/bin/sh', '-c', 'while :; do :; done'], { limits: { cpuMs: 200, wallMs: 5000 } });
  assert.equal(o.status, 'RESOURCE_KILLED', text(o));
  assert.ok(o.limitsExceeded.includes('cpuMs'));
  // v1 splits user/system by ticks: the sum can lag the precise total a little.
  assert.ok((o.resources.cpuUserMs ?? 0) + (o.resources.cpuSystemMs ?? 0) >= 100);
});

test('a memory bomb is OOM-killed by the cgroup (RESOURCE_KILLED, memory)', async (t) => {
  const caps = await doctor();
  if (!caps.cgroup.controllers.includes('memory')) return t.skip(`doctor: no memory controller (${caps.cgroup.detail})`);
  const o = await py('b=[]\nwhile True: b.append(bytearray(8<<20))', { limits: { memoryBytes: 64 << 20 } });
  assert.equal(o.status, 'RESOURCE_KILLED', text(o));
  assert.ok(o.limitsExceeded.includes('memoryBytes'));
  assert.ok((o.resources.peakMemoryBytes ?? 0) <= (64 << 20) + (1 << 20));
});

test('a fork bomb hits the pids limit (RESOURCE_KILLED, pids) and the host is fine', async (t) => {
  const caps = await doctor();
  if (!caps.cgroup.controllers.includes('pids')) return t.skip(`doctor: no pids controller (${caps.cgroup.detail})`);
  const o = await run(['/bin/sh', '-c', 'f(){ f | f & }; f; sleep 5'], { limits: { pids: 32, wallMs: 4000 } });
  assert.equal(o.status, 'RESOURCE_KILLED', text(o));
  assert.ok(o.limitsExceeded.includes('pids'));
  const after = await run(['/bin/true']);
  assert.equal(after.status, 'SUCCESS', text(after));
});

test('/out is size-capped', async () => {
  const o = await run(['/bin/sh', '-c', 'head -c 300000 /dev/zero > /out/big; echo rc=$?'], { limits: { outBytes: 64 << 10 } });
  assert.ok(o.limitsExceeded.includes('outBytes'), text(o));
  const big = o.fs.out?.find((c) => c.path === '/out/big');
  assert.ok(big && big.size <= 64 << 10);
});

test('a run of /bin/true leaves no cgroup, no mount and no staging dir behind (after sandboxIdle)', async () => {
  const o = await run(['/bin/true']);
  assert.equal(o.status, 'SUCCESS', text(o));
  // Cleanup runs after the result is returned; sandboxIdle() is the documented wait for it.
  await sandboxIdle();
  assert.ok(!existsSync(join(await stagingBase(), o.runId)), 'the staging dir survived');
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8');
  assert.ok(!mounts.includes(o.runId), 'a staging mount survived');
  const caps = await doctor();
  for (const m of Object.values(caps.cgroup.mounts)) assert.ok(!existsSync(join(m, 'airlock', o.runId)), `cgroup survived under ${m}`);
});

test('a run with 300 inputs (its folder removed on the thread pool) leaves no staging dir behind either', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-ns-many-'));
  const inputs = Array.from({ length: 300 }, (_, i) => {
    writeFileSync(join(dir, `f${i}`), `${i}`);
    return { hostPath: join(dir, `f${i}`), name: `f${i}` };
  });
  const o = await run(['/bin/sh', '-c', 'ls /in | wc -l'], { inputs });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.stdout.bytes.toString().trim(), '300');
  await sandboxIdle();
  assert.ok(!existsSync(join(await stagingBase(), o.runId)), 'the staging dir survived');
});

test('a run folder is removed without following a link in it, by either removal (few inputs, many inputs)', async () => {
  const outside = mkdtempSync(join(tmpdir(), 'airlock-ns-outside-'));
  writeFileSync(join(outside, 'keep.txt'), 'not the run\'s');
  for (const inputs of [1, 300]) {
    const dir = mkdtempSync(join(tmpdir(), 'airlock-ns-folder-'));
    mkdirSync(join(dir, 'in'));
    for (let i = 0; i < inputs; i++) writeFileSync(join(dir, 'in', `f${i}`), '');
    // What a program could leave where no tmpfs holds /out (a host without root): links out of the folder.
    mkdirSync(join(dir, 'out'));
    symlinkSync(outside, join(dir, 'out', 'dir-link'));
    symlinkSync(join(outside, 'keep.txt'), join(dir, 'out', 'file-link'));
    await removeRunFolder(dir, join(dir, 'in'));
    assert.ok(!existsSync(dir), `the folder with ${inputs} inputs survived`);
    assert.equal(readFileSync(join(outside, 'keep.txt'), 'utf8'), 'not the run\'s');
  }
});

test('a declared scope is seen through a copy-on-write overlay: the real files never change', async (t) => {
  const caps = await doctor();
  if (!caps.bwrap?.supports.overlay && !(caps.isRoot && caps.overlayfs)) return t.skip('doctor: no overlay possible on this host (not root or no overlayfs, bwrap < 0.9)');
  const scope = mkdtempSync(join('/var/tmp', 'airlock-ns-scope-'));
  t.after(() => rmSync(scope, { recursive: true, force: true }));
  // The sandbox writes as its host user: it gets exactly the permissions others have on the scope.
  chmodSync(scope, 0o777);
  writeFileSync(join(scope, 'keep.txt'), 'original', { mode: 0o666 });
  writeFileSync(join(scope, 'gone.txt'), 'delete me', { mode: 0o666 });
  chmodSync(join(scope, 'keep.txt'), 0o666);
  const o = await run(['/bin/sh', '-c', `echo changed > ${scope}/keep.txt; rm ${scope}/gone.txt; echo new > ${scope}/new.txt; cat ${scope}/keep.txt`], { scopes: [{ hostPath: scope }] });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.stdout.bytes.toString(), 'changed\n');
  assert.equal(readFileSync(join(scope, 'keep.txt'), 'utf8'), 'original');
  assert.ok(existsSync(join(scope, 'gone.txt')) && !existsSync(join(scope, 'new.txt')));
  const ch = new Map((o.fs.scopes[0]?.changes ?? []).map((c) => [c.path, c.change]));
  assert.equal(ch.get(join(scope, 'keep.txt')), 'modified', JSON.stringify(o.fs.scopes));
  assert.equal(ch.get(join(scope, 'gone.txt')), 'deleted');
  assert.equal(ch.get(join(scope, 'new.txt')), 'added');
  await sandboxIdle();
  assert.ok(!readFileSync('/proc/self/mountinfo', 'utf8').includes(o.runId), 'the overlay mount survived');
});

test('aborting the run signal (a caller\'s cancel) kills the whole sandbox at once: POLICY_ABORTED, canceled by the caller', async () => {
  const cancel = new AbortController();
  const t0 = Date.now();
  setTimeout(() => cancel.abort(), 300);
  const o = await run(['/bin/sh', '-c', 'sleep 30 & sleep 30'], { signal: cancel.signal, limits: { wallMs: 20_000 } });
  assert.equal(o.status, 'POLICY_ABORTED', text(o));
  assert.match(o.reason, /canceled by the caller/);
  assert.ok(Date.now() - t0 < 5000, 'the sandbox ended long before its wall time');
});

test('a memory limit too small for the sandbox to start ends promptly as a SANDBOX_ERROR that names the limit (never hangs)', { timeout: 30_000 }, async (t) => {
  const caps = await doctor();
  if (!caps.cgroup.usable || !caps.cgroup.controllers.includes('memory')) return t.skip('no memory cgroup controller on this host: the limit is only reported (airlock doctor says so)');
  const t0 = Date.now();
  const o = await run(['/bin/true'], { limits: { ...LIMITS, memoryBytes: 4096 } });
  assert.equal(o.status, 'SANDBOX_ERROR', text(o));
  assert.ok(Date.now() - t0 < 10_000, `ended in ${Date.now() - t0} ms`);
  assert.match(o.reason, /memory limit of 4096 bytes is too small/);
  assert.ok(o.limitsExceeded.includes('memoryBytes'));
});
