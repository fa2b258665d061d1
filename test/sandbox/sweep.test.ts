// A service killed with SIGKILL in the middle of a run leaves its run's cgroup, its /out tmpfs, its
// staging base and its sandbox /etc behind (the sandbox itself dies with it: --die-with-parent and
// the tracer's PTRACE_O_EXITKILL); the next process's sweep removes all of it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { doctor } from '../../src/sandbox/doctor.js';
import { sweepOrphans } from '../../src/sandbox/ns/sweep.js';

const runnerUrl = new URL('../../src/sandbox/ns/runner.js', import.meta.url).href;
const helpersUrl = new URL('./helpers-ns.js', import.meta.url).href;

/** The `airlock-ns-*` dirs of `pid` under tmpdir (staging base and sandbox /etc). */
const ownedBy = (pid: number): string[] =>
  readdirSync(tmpdir())
    .filter((n) => n.startsWith('airlock-ns-'))
    .map((n) => join(tmpdir(), n))
    .filter((d) => existsSync(join(d, 'owner.pid')) && readFileSync(join(d, 'owner.pid'), 'utf8').split(' ')[0] === String(pid));

const mountedBelow = (dir: string): boolean => readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => (l.split(' ')[4] ?? '').startsWith(`${dir}/`));

test('a service SIGKILLed mid-run leaves its cgroup, mounts, staging and /etc; the next sweep removes them', async (t) => {
  const caps = await doctor();
  if (!caps.isRoot || !caps.cgroup.usable || caps.blockers.length) return t.skip('needs root, a usable cgroup and a working ns lane');
  const child = spawn(process.execPath, ['--input-type=module', '-e', `const { runNs } = await import(${JSON.stringify(runnerUrl)}); const { LIMITS, freshOut } = await import(${JSON.stringify(helpersUrl)}); await runNs({ argv: ['/bin/sleep', '30'], outDir: freshOut(), limits: { ...LIMITS, wallMs: 60000 } });`], { stdio: 'ignore' });
  const pid = child.pid!;
  t.after(() => child.kill('SIGKILL'));
  // Wait until the run is under way: its staging base holds a run dir and the run's cgroup exists.
  let runId: string | undefined;
  let base: string | undefined;
  for (let i = 0; i < 500 && !runId; i++) {
    await new Promise((r) => setTimeout(r, 20));
    base = ownedBy(pid).find((d) => readdirSync(d).some((n) => n.startsWith('ns-')));
    const id = base && readdirSync(base).find((n) => n.startsWith('ns-'));
    if (id && Object.values(caps.cgroup.mounts).some((m) => existsSync(join(m, 'airlock', id, 'cgroup.procs')) && readFileSync(join(m, 'airlock', id, 'cgroup.procs'), 'utf8').trim() !== '')) runId = id;
  }
  assert.ok(runId && base, 'the child never got a sandbox running');
  const left = ownedBy(pid);
  assert.equal(left.length, 1, 'one staging base');
  assert.ok(readdirSync(base).some((n) => n.startsWith('etc-')), 'the sandbox /etc is made inside it');
  child.kill('SIGKILL');
  await new Promise((r) => child.once('exit', r));

  // Right after the kill, the group may still be emptying (the sweep waits for it). Another test
  // process may sweep first (any process's first run does): judge the end state and this run's errors.
  const report = sweepOrphans();
  assert.deepEqual(report.errors.filter((e) => e.includes(runId!) || e.includes(base!)), []);
  for (const m of Object.values(caps.cgroup.mounts)) assert.equal(existsSync(join(m, 'airlock', runId)), false, `cgroup ${m}/airlock/${runId} removed`);
  assert.equal(mountedBelow(base), false, 'nothing stays mounted below the staging base');
  for (const d of left) assert.equal(existsSync(d), false, `${d} removed`);
});

test('an airlock process that ends normally leaves no staging base, mount or sandbox /etc behind', { skip: process.getuid?.() !== 0 }, async () => {
  const child = spawn(process.execPath, ['--input-type=module', '-e', `const { runNs } = await import(${JSON.stringify(runnerUrl)}); const { LIMITS, freshOut } = await import(${JSON.stringify(helpersUrl)}); const { sandboxIdle } = await import(${JSON.stringify(runnerUrl)}); const o = await runNs({ argv: ['/bin/true'], outDir: freshOut(), limits: LIMITS }); await sandboxIdle(); console.log(o.status);`], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d));
  const pid = child.pid!;
  await new Promise((r) => child.once('exit', r));
  assert.equal(out.trim(), 'SUCCESS');
  assert.deepEqual(ownedBy(pid), [], 'its staging base (with its mounts) and /etc were removed at exit');
});

test('a sweep never takes a live process\'s base, even one whose pid a dead owner once had', async () => {
  const { ownerStamp } = await import('../../src/base/owner.js');
  const live = join(tmpdir(), `airlock-ns-livetest-${process.pid}`);
  const reused = join(tmpdir(), `airlock-ns-reusedtest-${process.pid}`);
  for (const d of [live, reused]) mkdirSync(d, { recursive: true });
  writeFileSync(join(live, 'owner.pid'), ownerStamp());
  // Same pid as this live process, another start time: the process that wrote it is gone.
  writeFileSync(join(reused, 'owner.pid'), `${process.pid} 1`);
  sweepOrphans();
  assert.equal(existsSync(live), true, 'a live owner keeps its base');
  assert.equal(existsSync(reused), false, 'a pid reused since is not the owner');
  rmSync(live, { recursive: true, force: true });
});

/** A leftover as a process leaves it: staging base with a run folder, a tmpfs mounted in it, and the run's cgroup. */
function leftover(tmp: string, tag: string, cgMounts: string[]): { base: string; mount: string; groups: string[] } {
  const base = mkdtempSync(join(tmp, `airlock-ns-${tag}-`));
  const run = `ns-${tag}-${randomBytes(4).toString('hex')}`;
  const mount = join(base, run, 'out');
  mkdirSync(mount, { recursive: true });
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'airlock-test', mount]);
  const groups = cgMounts.map((m) => join(m, 'airlock', run));
  for (const g of groups) mkdirSync(g, { recursive: true });
  return { base, mount, groups };
}
const mounted = (dir: string): boolean => readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => l.split(' ')[4] === dir);

test('owners in names: a live process\'s leftovers stay (whatever it holds), a dead one\'s go, and a pid reused since is not the owner', async (t) => {
  const caps = await doctor();
  if (!caps.isRoot || !caps.cgroup.usable) return t.skip('needs root and a usable cgroup');
  const { ownerTag } = await import('../../src/base/owner.js');
  const cgMounts = [...new Set(Object.values(caps.cgroup.mounts))];
  const tmp = mkdtempSync(join(tmpdir(), 'airlock-sweep-'));
  const alive = spawn('/bin/sleep', ['60'], { stdio: 'ignore' });
  const dead = spawn('/bin/sleep', ['60'], { stdio: 'ignore' });
  t.after(() => alive.kill('SIGKILL'));
  await new Promise((r) => setTimeout(r, 50)); // both have exec'd (their start time is readable)
  const liveTag = ownerTag(alive.pid!);
  const deadTag = ownerTag(dead.pid!);
  dead.kill('SIGKILL');
  await new Promise((r) => dead.once('exit', r));
  const [pidPart, start] = liveTag.split('.') as [string, string];
  const reusedTag = `${pidPart}.${(parseInt(start, 36) - 1).toString(36)}`; // the live pid, another start time
  const live = leftover(tmp, liveTag, cgMounts);
  const gone = leftover(tmp, deadTag, cgMounts);
  const reused = leftover(tmp, reusedTag, cgMounts);
  const temp = mkdtempSync(join(tmp, `airlock-exec-in-${deadTag}-`)); // any owned temp folder, not only staging
  const legacy = mkdtempSync(join(tmp, 'airlock-demo-')); // no owner in its name: never ours to judge

  const saved = process.env.TMPDIR;
  process.env.TMPDIR = tmp;
  let report;
  try {
    report = sweepOrphans();
  } finally {
    if (saved === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved;
  }
  assert.deepEqual(report.errors.filter((e) => e.includes(tmp) || e.includes(deadTag) || e.includes(reusedTag)), []);
  assert.ok(existsSync(live.base) && mounted(live.mount), 'the live process keeps its base and its mount');
  for (const g of live.groups) assert.ok(existsSync(g), `the live process keeps ${g}`);
  for (const l of [gone, reused]) {
    assert.equal(existsSync(l.base), false, `${l.base} removed`);
    assert.equal(mounted(l.mount), false, `${l.mount} unmounted`);
    for (const g of l.groups) assert.equal(existsSync(g), false, `${g} removed`);
  }
  assert.equal(existsSync(temp), false, 'a dead process\'s temp folder removed');
  assert.ok(existsSync(legacy), 'a folder without an owner in its name stays');

  // Cleanup of the live one's (its owner would at its exit).
  execFileSync('umount', [live.mount]);
  for (const g of live.groups) rmdirSync(g);
  rmSync(tmp, { recursive: true, force: true });
});

test('several processes sweeping one TMPDIR at once: each dead leftover removed, no sweeper fails or reports an error', async (t) => {
  const caps = await doctor();
  if (!caps.isRoot || !caps.cgroup.usable) return t.skip('needs root and a usable cgroup');
  const cgMounts = [...new Set(Object.values(caps.cgroup.mounts))];
  const tmp = mkdtempSync(join(tmpdir(), 'airlock-sweep-'));
  const left: ReturnType<typeof leftover>[] = [];
  for (let i = 0; i < 6; i++) {
    // A process that has ended; start time 1 (a tick after boot): whoever has its pid now is not it.
    const tag = `${spawnSync('/bin/true').pid.toString(36)}.1`;
    for (let j = 0; j < 4; j++) left.push(leftover(tmp, tag, cgMounts));
  }
  const sweepUrl = new URL('../../src/sandbox/ns/sweep.js', import.meta.url).href;
  const script = `const { sweepOrphans } = await import(${JSON.stringify(sweepUrl)}); console.log(JSON.stringify(sweepOrphans().errors.filter((e) => e.includes(${JSON.stringify(tmp)}))));`;
  const outs = await Promise.all(
    Array.from({ length: 4 }, () => {
      const c = spawn(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, TMPDIR: tmp }, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      c.stdout.on('data', (d: Buffer) => (out += d));
      c.stderr.on('data', (d: Buffer) => (out += d));
      return new Promise<string>((r) => c.on('close', (code) => r(`${code} ${out.trim()}`)));
    }),
  );
  assert.deepEqual(outs, Array(4).fill('0 []'));
  for (const l of left) {
    assert.equal(existsSync(l.base), false);
    assert.equal(mounted(l.mount), false);
    for (const g of l.groups) assert.equal(existsSync(g), false);
  }
  assert.deepEqual(readdirSync(tmp), []);
  rmSync(tmp, { recursive: true, force: true });
});
