// A service killed with SIGKILL in the middle of a run leaves its run's cgroup, its /out tmpfs, its
// staging base and its sandbox /etc behind (the sandbox itself dies with it: --die-with-parent and
// the tracer's PTRACE_O_EXITKILL); the next process's sweep removes all of it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
  assert.equal(left.length, 2, 'a staging base and a sandbox /etc');
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
  const { ownerStamp } = await import('../../src/sandbox/ns/owner.js');
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
