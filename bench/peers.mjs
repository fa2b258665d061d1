// npm run bench:peers — the same trivial command through Airlock and its peers, side by side in one
// process, in rounds (each round runs every candidate once, so the machine's drift hits them alike):
//   airlock ns      a full gated run through the library API, in a sandbox it starts itself (checked):
//                   validate a COMMAND_EXECUTION descriptor
//                   with one declared scope, sandbox, observe (syscall tracer, diffs, limits), judge, render;
//                   as a service starts it: from the launcher held ahead of need in a fresh cgroup (ns/held.ts)
//   airlock ns, ahead of need  a full gated run of the command as `airlock exec -- CMD` makes it (no
//                   scope, no network) in a sandbox started ahead of need (a waiting one before each
//                   run; its start, in the background, is counted in its CPU per run)
//   airlock monty   a full gated run of a Tool Request in the Monty lane, a one-line program doing the same
//   bare bwrap      a minimal bwrap of the command spawned from Node (the kernel's cost, no checks)
//   sandbox-runtime Anthropic's library (@anthropic-ai/sandbox-runtime): wrapWithSandbox + spawn, as its
//                   README shows; no network allowed, one writable folder, run from an empty folder
// for /bin/true and `echo hi` (each run's output is checked). Prints p50/p99, CPU per run of this
// process tree, and the ratios. sandbox-runtime is an optional dev dependency: where it is not
// installed (or SANDBOX_RUNTIME_DIR does not point at an install) the bench says so and skips it.
//   BENCH_RUNS=N (default 100; sandbox-runtime: BENCH_SRT_RUNS, default min(N, 50))
//   SANDBOX_RUNTIME_DIR=DIR  the package folder, or a folder with node_modules/@anthropic-ai/sandbox-runtime
import { Buffer } from 'node:buffer';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { closeMontyPools } from '../dist/src/sandbox/lanes/monty-pool.js';
import { sandboxIdle } from '../dist/src/sandbox/ns/runner.js';
import { closeSandboxPool, configureSandboxPool, sandboxPoolState } from '../dist/src/sandbox/ns/pool.js';
import { keepLaunchersHeld } from '../dist/src/sandbox/ns/held.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { bareArgs, execRun, montyRun, nsRun, removeWorkspace } from './airlock-run.mjs';
import { loadAverage, treeCpuMs } from './proc-cpu.mjs';
import { descriptorFor, montyRequestFor } from './sandbox-fixtures.mjs';
import { cgroupMovesNote, fmt, summary } from './stats.mjs';

const N = Number(process.env.BENCH_RUNS ?? 100);
const N_SRT = Number(process.env.BENCH_SRT_RUNS ?? Math.min(N, 50));
const PKG = '@anthropic-ai/sandbox-runtime';

/** sandbox-runtime's module, or why it is not here. */
async function loadSandboxRuntime() {
  const dir = process.env.SANDBOX_RUNTIME_DIR;
  if (dir) {
    const pkgDir = [dir, join(dir, 'node_modules', PKG)].find((d) => existsSync(join(d, 'package.json')) && JSON.parse(readFileSync(join(d, 'package.json'), 'utf8')).name === PKG);
    if (!pkgDir) return { absent: `SANDBOX_RUNTIME_DIR=${dir} holds no ${PKG}` };
    const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
    return { mod: await import(pathToFileURL(join(pkgDir, pkg.main ?? 'index.js')).href), version: pkg.version };
  }
  try {
    const mod = await import(PKG);
    return { mod, version: 'installed' };
  } catch {
    return { absent: `${PKG} is not installed (an optional dev dependency: npm i -D ${PKG}, or point SANDBOX_RUNTIME_DIR at an install)` };
  }
}

/** Spawns `cmd` (argv, or a shell string) and resolves with its stdout; rejects unless it exits 0. */
const run = (cmd, opts = {}) =>
  new Promise((resolve, reject) => {
    const p = Array.isArray(cmd) ? spawn(cmd[0], cmd.slice(1), { stdio: ['ignore', 'pipe', 'ignore'], ...opts }) : spawn(cmd, { shell: true, stdio: ['ignore', 'pipe', 'ignore'], ...opts });
    const out = [];
    p.stdout.on('data', (d) => out.push(d));
    p.once('error', reject);
    p.once('close', (code) => (code === 0 ? resolve(Buffer.concat(out).toString()) : reject(new Error(`${Array.isArray(cmd) ? cmd[0] : 'sh'} exit ${code}`))));
  });

const expect = (what, got, want) => {
  if (got !== want) throw new Error(`${what}: output ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
};

const COMMANDS = [
  { name: '/bin/true', argv: ['/bin/true'], shell: '/bin/true', monty: '1 + 1', out: '' },
  { name: 'echo hi', argv: ['/bin/echo', 'hi'], shell: 'echo hi', monty: 'print("hi")', out: 'hi\n' },
];

// sandbox-runtime reads its working folder (it looks for files to protect there): give it an empty one.
const scratch = mkdtempSync(join(tmpdir(), 'airlock-peers-'));
process.chdir(scratch);
const srt = await loadSandboxRuntime();
let srtWhy = srt.absent ?? null;
if (srt.mod) {
  try {
    await srt.mod.SandboxManager.initialize({ network: { allowedDomains: [], deniedDomains: [] }, filesystem: { denyRead: [], allowWrite: [scratch], denyWrite: [] } });
  } catch (e) {
    srtWhy = `${PKG} ${srt.version} is installed but cannot start here: ${e.message}`;
  }
}

// Sandboxes ahead of need for the `airlock exec` shape only: the full gated run (with its scope) starts
// its own, from the launcher a service holds (pipeline/warm.ts does both).
configureSandboxPool(1, (shape) => shape.scopes.length === 0);
keepLaunchersHeld(2);
let pooledMisses = 0;
let heldMisses = 0;
console.log(`load average at the start: ${loadAverage()}; ${N} runs of each (sandbox-runtime ${srtWhy ? 'absent' : N_SRT}), in rounds`);
console.log(await cgroupMovesNote());
for (const c of COMMANDS) {
  const wrapMs = []; // sandbox-runtime's wrapWithSandbox alone
  const candidates = [
    {
      name: 'airlock ns (full gated run)',
      fn: async () => {
        const r = await nsRun(descriptorFor(c.argv));
        if (r.sandboxResult.execution.status !== 'SUCCESS' || !r.observation.sideEffects) throw new Error(`airlock ns: ${r.sandboxResult.execution.status}, side effects ${r.observation.sideEffects ? 'observed' : 'unobserved'}`);
        if (!r.observation.host.sandboxStart?.startsWith('on request')) throw new Error('airlock ns (full gated run) must start its own sandbox');
        if (r.observation.host.sandboxStart !== 'on request, held launcher') heldMisses++;
        expect('airlock ns', r.observation.stdout.bytes.toString(), c.out);
        return r;
      },
      settle: sandboxIdle, // its cleanup (cgroup, unmount, staging) is part of its CPU
    },
    {
      name: 'airlock ns, ahead of need',
      fn: async () => {
        const r = await execRun(c.argv);
        if (r.sandboxResult.execution.status !== 'SUCCESS' || !r.observation.sideEffects) throw new Error(`airlock ns pooled: ${r.sandboxResult.execution.status}`);
        if (r.observation.host.sandboxStart !== 'ahead of need') pooledMisses++;
        expect('airlock ns pooled', r.observation.stdout.bytes.toString(), c.out);
        return r;
      },
      // The next run finds a sandbox waiting: its start (after this run) is in this candidate's CPU.
      settle: async () => {
        await sandboxIdle();
        for (let i = 0; sandboxPoolState().waiting < 1 && i < 500; i++) await sleep(5);
      },
    },
    {
      name: 'airlock monty (full gated run)',
      fn: async () => {
        const r = await montyRun(montyRequestFor(c.monty));
        if (r.sandboxResult.execution.status !== 'SUCCESS') throw new Error(`airlock monty: ${r.sandboxResult.execution.status}`);
        expect('airlock monty', r.observation.stdout.bytes.toString(), c.out);
        return r;
      },
    },
    { name: 'bare bwrap', fn: async () => expect('bare bwrap', await run(['bwrap', ...bareArgs(c.argv)]), c.out) },
  ];
  if (!srtWhy) {
    candidates.push({
      name: 'sandbox-runtime (wrap + spawn)',
      n: N_SRT,
      fn: async () => {
        const t0 = performance.now();
        const wrapped = await srt.mod.SandboxManager.wrapWithSandbox(c.shell);
        wrapMs.push(performance.now() - t0);
        expect('sandbox-runtime', await run(wrapped), c.out);
      },
    });
  }
  for (const k of candidates) {
    k.ms = [];
    k.cpu = 0;
    for (let i = 0; i < 3; i++) await k.fn(); // warm-up
    await k.settle?.();
  }
  wrapMs.length = 0;
  for (let i = 0; i < N; i++) {
    for (const k of candidates) {
      if (i >= (k.n ?? N)) continue;
      const c0 = treeCpuMs();
      const t0 = performance.now();
      await k.fn();
      k.ms.push(performance.now() - t0);
      await k.settle?.();
      k.cpu += treeCpuMs() - c0;
    }
  }
  console.log(`\n${c.name}:`);
  const stats = Object.fromEntries(candidates.map((k) => [k.name, { ...summary(k.ms), cpu: k.cpu / k.ms.length }]));
  const bare = stats['bare bwrap'];
  for (const [name, s] of Object.entries(stats)) {
    console.log(`  ${name.padEnd(31)} p50 ${fmt(s.p50).padStart(7)} ms  p99 ${fmt(s.p99).padStart(7)} ms  CPU/run ${fmt(s.cpu).padStart(6)} ms  p50 ${fmt(s.p50 / bare.p50).padStart(5)}x bare  (n=${s.n})`);
  }
  const srtS = stats['sandbox-runtime (wrap + spawn)'];
  if (srtS) {
    const w = summary(wrapMs);
    console.log(`    of which wrapWithSandbox alone: p50 ${fmt(w.p50)} ms  p99 ${fmt(w.p99)} ms`);
    console.log(`  sandbox-runtime / airlock ns full gated run, p50: ${fmt(srtS.p50 / stats['airlock ns (full gated run)'].p50)}x  [target >= 2x]; CPU/run ${fmt(srtS.cpu / stats['airlock ns (full gated run)'].cpu)}x`);
    console.log(`  sandbox-runtime / airlock ns ahead of need, p50: ${fmt(srtS.p50 / stats['airlock ns, ahead of need'].p50)}x; CPU/run ${fmt(srtS.cpu / stats['airlock ns, ahead of need'].cpu)}x`);
  } else console.log(`  sandbox-runtime: ${srtWhy}`);
}
console.log(`\nload average at the end: ${loadAverage()}${pooledMisses ? `; ${pooledMisses} "ahead of need" runs found no sandbox waiting` : ''}${heldMisses ? `; ${heldMisses} full gated runs found no launcher held` : ''}`);
await keepLaunchersHeld(0);
await closeSandboxPool();
if (srt.mod && !srtWhy) await srt.mod.SandboxManager.reset();
await closeMontyPools();
await sandboxIdle();
removeWorkspace();
process.chdir(tmpdir());
rmSync(scratch, { recursive: true, force: true });
