// The launcher a service holds ahead of need for runs started on request (ns/held.ts, native/tracer.c
// "held launchers"), with real bwrap, the real host tracer and real cgroups: a run started from it
// keeps every limit of its own (written into the held cgroup when the run takes it), the launcher
// carries nothing of ours into the sandbox, and one that is killed, dropped, left unused or still
// joining its cgroup leaves no process or cgroup behind.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, constants, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { keepLaunchersHeld, launcherHeld } from '../../src/sandbox/ns/held.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import { syscallTracer } from '../../src/sandbox/observe/tracer.js';
import { createRunCgroup, detectCgroups } from '../../src/sandbox/cgroup/index.js';
import type { Observation } from '../../src/sandbox/types.js';
import { airlock } from '../helpers/cli.js';
import { freshOut, LIMITS, run, text, until as waitUntil } from './helpers-ns.js';

const skip = syscallTracer() === null ? 'needs root and the host tracer (dist/native/airlock-tracer)' : !detectCgroups(true).usable ? 'needs a usable cgroup hierarchy' : false;

after(async () => {
  await keepLaunchersHeld(0);
  await sandboxIdle();
});

const until = (what: string, ok: () => boolean, ms?: number): Promise<void> => waitUntil(what, ok, launcherHeld, ms);

/** A launcher waits in its cgroup (the first run started on request after turning it on holds one). */
async function held(): Promise<string[]> {
  keepLaunchersHeld(1);
  if (!launcherHeld().waiting) await run(['/bin/true']);
  await until('a launcher held', () => launcherHeld().waiting > 0);
  const dirs = launcherHeld().cgroupDirs;
  await until('the launcher in its cgroup', () => pidsOf(dirs).length === 1);
  return dirs;
}

const fromHeld = (o: Observation): void => assert.equal(o.host.sandboxStart, 'on request, held launcher', `the run did not start from the held launcher: ${text(o)}`);

function pidsOf(dirs: string[]): number[] {
  try {
    return readFileSync(join(dirs[0]!, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

test('a run started on request takes the held launcher; the next one is held at once', { skip }, async () => {
  const dirs = await held();
  const o = await run(['/bin/echo', 'from the held launcher']);
  fromHeld(o);
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.stdout.bytes.toString(), 'from the held launcher\n');
  assert.deepEqual(o.sideEffects?.processesSpawned.executables, [{ path: '/bin/echo', count: 1 }]);
  await until('the next launcher held', () => launcherHeld().waiting > 0 && launcherHeld().cgroupDirs[0] !== dirs[0]);
  await sandboxIdle();
  for (const d of dirs) assert.equal(existsSync(d), false, `the run's cgroup ${d} is removed after it`);
});

test('with two held, two runs that come at once both start from a held launcher', { skip }, async () => {
  await held();
  await keepLaunchersHeld(2);
  await until('two held', () => launcherHeld().waiting === 2);
  const [x, y] = await Promise.all([run(['/bin/echo', 'one']), run(['/bin/echo', 'two'])]);
  fromHeld(x);
  fromHeld(y);
  assert.deepEqual([x.stdout.bytes.toString(), y.stdout.bytes.toString()], ['one\n', 'two\n']);
  await until('two held again', () => launcherHeld().waiting === 2);
  await keepLaunchersHeld(1);
  assert.equal(launcherHeld().waiting, 1, 'lowering the count drops the surplus');
});

test('with two held, a run that takes one leaves the other waiting and holds the next after it ends, not during its staging', { skip }, async () => {
  await held();
  await keepLaunchersHeld(2);
  await until('two held', () => launcherHeld().waiting === 2);
  await sandboxIdle(); // no earlier run's cleanup (which refills too) may land in this one
  let whileRunning = -1;
  const o = await run(['/bin/true'], { onEvent: (e) => e.kind === 'phase' && e.phase === 'running' && (whileRunning = launcherHeld().waiting) });
  fromHeld(o);
  assert.equal(whileRunning, 1, 'the next launcher was held in the run itself');
  await sandboxIdle();
  assert.equal(launcherHeld().waiting, 2, 'held again once the run and its cleanup were done');
  await keepLaunchersHeld(1);
});

test('limits hold per run from a held launcher: each run gets its own memory and pids limits, written when it takes it', { skip }, async () => {
  await held();
  const bomb = await run(['/bin/sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 5 & done; wait'], { limits: { pids: 8 } });
  fromHeld(bomb);
  assert.ok(bomb.limitsExceeded.includes('pids'), text(bomb));

  // The next launcher waited with a cgroup made for no run: this run's 64 MiB is the kernel's limit.
  await held();
  const oom = await run(['python3', '-c', 'x = bytearray(400 << 20); print(len(x))'], { limits: { memoryBytes: 64 << 20 } });
  fromHeld(oom);
  assert.equal(oom.status, 'RESOURCE_KILLED', text(oom));
  assert.ok(oom.limitsExceeded.includes('memoryBytes'), text(oom));

  // And a run with more than the waiting cgroup's own limits (64 MiB, 1 process) gets all of it.
  await held();
  const big = await run(['python3', '-c', 'import os\nx = bytearray(150 << 20)\npids = [os.fork() for _ in range(3)]\nprint(len(x)) if all(pids) else os._exit(0)'], { limits: { memoryBytes: 256 << 20, pids: 16 } });
  fromHeld(big);
  assert.equal(big.status, 'SUCCESS', text(big));
  assert.equal(big.stdout.bytes.toString(), `${150 << 20}\n`);
});

test('a launch request longer than a pipe holds (4 arguments of 120 kB) reaches the held launcher whole, and the run is not charged for it', { skip }, async () => {
  await held();
  const arg = 'x'.repeat(120_000);
  // The request is decoded by the tracer, outside the run's cgroup (a launcher that decoded it itself
  // was charged ~0.8 s of CPU for these, and killed at a 500 ms CPU limit).
  const o = await run(['python3', '-c', "import sys; print(len(sys.argv) - 1, all(a == 'x' * 120000 for a in sys.argv[1:]))", arg, arg, arg, arg], { limits: { cpuMs: 500 } });
  fromHeld(o);
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.stdout.bytes.toString(), '4 True\n');
  const cpu = (o.resources.cpuUserMs ?? 0) + (o.resources.cpuSystemMs ?? 0);
  assert.ok(cpu < 300, `the run's CPU is its program's: ${cpu} ms`);
});

test('a held launcher killed after its run took it (while the run staged) gives way to one forked into the same cgroup', { skip }, async () => {
  const dirs = await held();
  const [pid] = pidsOf(dirs);
  let release!: () => void;
  const staged = new Promise<void>((r) => (release = r));
  const p = run(['/bin/echo', 'forked instead'], { outDirParent: staged, limits: { pids: 8 } });
  await until('the run took it', () => launcherHeld().cgroupDirs[0] !== dirs[0]);
  process.kill(pid!, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 200));
  release();
  const o = await p;
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.stdout.bytes.toString(), 'forked instead\n');
  assert.equal(o.host.sandboxStart, 'on request', 'the observation says the launcher was forked');
  const bomb = await run(['/bin/sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 5 & done; wait'], { limits: { pids: 8 } });
  assert.ok(bomb.limitsExceeded.includes('pids'), text(bomb));
});

test('a held run does not wait for a launcher forked meanwhile that is slow to start (it reads its request by length, and launchers keep no other fd)', { skip }, async () => {
  const tracer = syscallTracer()!;
  const info = detectCgroups(true);
  const dir = mkdtempSync(join(tmpdir(), 'airlock-held-test-'));
  const a = createRunCgroup(info, `ns-test-a-${process.pid}`, { memoryBytes: 64 << 20, pids: 4 }, { prime: false });
  const b = createRunCgroup(info, `ns-test-b-${process.pid}`, { memoryBytes: 64 << 20, pids: 4 }, { prime: false });
  const procs = (g: typeof a): string[] => g.dirs.map((d) => join(d, 'cgroup.procs'));
  const spec = (name: string, g: typeof a) => ({ argv: ['/bin/true'], stdoutFifo: join(dir, `${name}.out`), stderrFifo: join(dir, `${name}.err`), seccompFile: '/dev/null', cgroupProcs: procs(g), limits: { cpuSoftS: 2, cpuHardS: 3, fsizeBytes: null, asBytes: null, nproc: null, uid: 65534, gid: 65534 }, hold: false });
  const readers: number[] = [];
  const openReaders = (sp: { stdoutFifo: string; stderrFifo: string }): void => {
    for (const f of [sp.stdoutFifo, sp.stderrFifo]) readers.push(openSync(f, constants.O_RDONLY | constants.O_NONBLOCK));
  };
  try {
    const h = tracer.hold(procs(a));
    await until('the launcher in its cgroup', () => pidsOf(a.dirs).length === 1);
    // An ordinary launch whose launcher waits on its FIFOs (nobody opens them for 3 s): a held launcher
    // that read its request until EOF waited for it, since this one kept a copy of the pipe.
    const slowSpec = spec('slow', b);
    const slow = tracer.launch(slowSpec);
    await slow.started;
    setTimeout(() => openReaders(slowSpec), 3000);
    const t0 = Date.now();
    const fast = tracer.launch({ ...spec('held', a), held: h });
    const st = await fast.started;
    assert.ok('pid' in st && st.held, JSON.stringify(st));
    openReaders(spec('held', a));
    const ex = await fast.exit;
    assert.equal(ex.code, 0, JSON.stringify(ex));
    assert.ok(Date.now() - t0 < 2000, `the held run took ${Date.now() - t0} ms`);
    await slow.exit;
  } finally {
    for (const fd of readers) closeSync(fd);
    await a.destroy();
    await b.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('hostile: the held launcher carries none of our descriptors, and a program in its sandbox finds only its stdio', { skip }, async () => {
  const dirs = await held();
  const [pid] = pidsOf(dirs);
  // While it waits: its four pipes to the tracer, nothing else (not node's, not another run's).
  const fds = readdirSync(`/proc/${pid}/fd`).map((fd) => readlinkSync(`/proc/${pid}/fd/${fd}`));
  assert.equal(fds.length, 4, JSON.stringify(fds));
  for (const f of fds) assert.match(f, /^pipe:\[\d+\]$/, JSON.stringify(fds));
  const o = await run(['python3', '-c', 'import os\nprint("fds", sorted(int(f) for f in os.listdir("/proc/self/fd")))\nprint("uid", os.getuid())']);
  fromHeld(o);
  assert.match(o.stdout.bytes.toString(), /^fds \[0, 1, 2, 3\]\nuid \d+\n$/, `only stdio (and the listing's own descriptor): ${text(o)}`);
  assert.doesNotMatch(o.stdout.bytes.toString(), /uid 0\n/, 'the program is not root');
});

test('turning the held launcher off resolves once it is gone and its cgroup removed (a service\'s close awaits it)', { skip }, async () => {
  const dirs = await held();
  await keepLaunchersHeld(0);
  for (const d of dirs) assert.equal(existsSync(d), false, `${d} is left after the close`);
});

test('a held launcher killed while it waits is dropped with a warning, and the run forks its own', { skip }, async () => {
  const dirs = await held();
  const warnings: string[] = [];
  const onWarning = (w: Error): void => void warnings.push(w.message);
  process.on('warning', onWarning);
  try {
    process.kill(pidsOf(dirs)[0]!, 'SIGKILL');
    await until('the launcher reported gone', () => launcherHeld().waiting === 0);
    const o = await run(['/bin/echo', 'still here']);
    assert.equal(o.status, 'SUCCESS', text(o));
    assert.equal(o.host.sandboxStart, 'on request');
    assert.equal(o.stdout.bytes.toString(), 'still here\n');
    await until('the warning', () => warnings.some((w) => /was not used .*ended while it waited/.test(w)));
    await until('its cgroup removed', () => dirs.every((d) => !existsSync(d)));
  } finally {
    process.off('warning', onWarning);
  }
});

test('dropping a launcher that is still joining its cgroup leaves no process or cgroup (ended by pid, not by its group)', { skip }, async () => {
  await held();
  const seen: string[][] = [];
  for (let i = 0; i < 12; i++) {
    // After a pause, a move into a cgroup waits for the kernel (without favordynmods: 5-25 ms) while
    // holding cgroup_mutex: a group emptied and removed then is joined first, and stays busy.
    await new Promise((r) => setTimeout(r, 120));
    keepLaunchersHeld(1); // holds one at once (a run was seen), then drops it before it could settle
    seen.push(launcherHeld().cgroupDirs);
    if (i % 3 > 0) await new Promise((r) => setTimeout(r, i % 3));
    void keepLaunchersHeld(0);
  }
  assert.ok(seen.every((d) => d.length > 0), 'each turn held a launcher');
  await until('every dropped launcher\'s cgroup removed', () => seen.flat().every((d) => !existsSync(d)));
  // The tracer forks every launcher: none is left (nothing runs, none is held).
  const children = (pid: number): number[] => spawnSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean).map(Number);
  const tracer = children(process.pid).filter((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('airlock-tracer'));
  assert.equal(tracer.length, 1, 'the tracer runs');
  await until('no launcher left', () => children(tracer[0]!).length === 0);
});

test('a run that ends before its launch (an input changed) ends the launcher it took and removes its cgroup', { skip }, async () => {
  const dirs = await held();
  const dir = mkdtempSync(join(tmpdir(), 'airlock-held-test-'));
  const input = join(dir, 'data.txt');
  writeFileSync(input, 'actual');
  const o = await run(['/bin/cat', '/in/data.txt'], { inputs: [{ name: 'data.txt', hostPath: input, sha256: createHash('sha256').update('declared').digest('hex') }] });
  assert.equal(o.status, 'SANDBOX_ERROR', text(o));
  assert.match(o.reason ?? '', /NS_INPUT_HASH_MISMATCH|sha256/, text(o));
  await sandboxIdle();
  await until('the taken launcher ended and its cgroup removed', () => dirs.every((d) => !existsSync(d)));
});

test('a process with a launcher held exits by itself, and its exit removes the launcher and its cgroup', { skip }, () => {
  const script = `
    const { keepLaunchersHeld, launcherHeld } = await import(${JSON.stringify(new URL('../../src/sandbox/ns/held.js', import.meta.url).href)});
    const { runNs, sandboxIdle } = await import(${JSON.stringify(new URL('../../src/sandbox/ns/runner.js', import.meta.url).href)});
    keepLaunchersHeld(1);
    const o = await runNs({ argv: ['/bin/true'], outDir: process.env.OUT, limits: ${JSON.stringify(LIMITS)} });
    await sandboxIdle();
    while (launcherHeld().waiting === 0) await new Promise((r) => setTimeout(r, 20));
    console.log(JSON.stringify({ status: o.status, dirs: launcherHeld().cgroupDirs }));`;
  const t0 = Date.now();
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000, env: { ...process.env, OUT: freshOut() } });
  assert.equal(r.status, 0, `${r.stderr}`);
  assert.ok(Date.now() - t0 < 20_000, 'it did not wait for its held launcher');
  const { status, dirs } = JSON.parse(r.stdout.trim().split('\n').pop()!) as { status: string; dirs: string[] };
  assert.equal(status, 'SUCCESS');
  assert.ok(dirs.length > 0);
  for (const d of dirs) assert.equal(existsSync(d), false, `the held launcher's cgroup ${d} is gone with its process`);
});

test('airlock doctor says whether a service holds a launcher here', { skip }, () => {
  const r = airlock(['doctor']);
  assert.match(r.stdout, /\nheld launchers +yes: services hold 2 launchers already moved into fresh cgroups/, r.stdout);
  const off = airlock(['doctor'], { env: { AIRLOCK_SYSCALL_TRACER: 'strace' } });
  assert.match(off.stdout, /\nheld launchers +NO: they need root and the host syscall tracer/, off.stdout);
  const chosen = airlock(['doctor'], { env: { AIRLOCK_HELD_LAUNCHERS: '0' } });
  assert.match(chosen.stdout, /\nheld launchers +off \(AIRLOCK_HELD_LAUNCHERS=0\)/, chosen.stdout);
});

test('a service holds launchers (warmLanes), unless AIRLOCK_HELD_LAUNCHERS=0; its close removes them', { skip }, () => {
  const script = `
    const { warmLanes, closeLanes } = await import(${JSON.stringify(new URL('../../src/pipeline/warm.js', import.meta.url).href)});
    const { launcherHeld } = await import(${JSON.stringify(new URL('../../src/sandbox/ns/held.js', import.meta.url).href)});
    const { runNs, sandboxIdle } = await import(${JSON.stringify(new URL('../../src/sandbox/ns/runner.js', import.meta.url).href)});
    const { existsSync } = await import('node:fs');
    warmLanes({ monty: false });
    const starts = [];
    for (let i = 0; i < 3; i++) {
      const o = await runNs({ argv: ['/bin/true'], outDir: process.env.OUT + i, limits: ${JSON.stringify(LIMITS)} });
      starts.push(o.host.sandboxStart);
      await sandboxIdle();
    }
    const dirs = launcherHeld().cgroupDirs;
    await closeLanes();
    console.log(JSON.stringify({ starts, left: dirs.filter((d) => existsSync(d)) }));`;
  const go = (env: NodeJS.ProcessEnv): { starts: string[]; left: string[] } => {
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000, env: { ...process.env, OUT: freshOut(), AIRLOCK_SANDBOX_POOL: '0', ...env } });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout.trim().split('\n').pop()!) as { starts: string[]; left: string[] };
  };
  const on = go({});
  assert.deepEqual(on.starts, ['on request', 'on request, held launcher', 'on request, held launcher']);
  assert.deepEqual(on.left, [], 'closeLanes removed the held launcher\'s cgroup');
  const off = go({ AIRLOCK_HELD_LAUNCHERS: '0' });
  assert.deepEqual(off.starts, ['on request', 'on request', 'on request']);
});
