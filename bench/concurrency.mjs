// npm run bench:concurrency — many runs at once on one host (issue 21): 1, 2 and 4 processes in
// parallel, each a long-lived host (as a gate or a UTP worker is) doing BENCH_RUNS runs of /bin/true
// through the host core (policy, approval, ns sandbox, observation, judge, run record, audit log),
// all on ONE workspace and ONE TMPDIR. Prints runs/s, p50/p99 per run, where a run's time went
// (the runner's own phases: staging, launch, program, observe; the rest: policy, judge, render, run
// record and the audit append under its lock), CPU per run of the hosts and all they started (user
// and kernel), the cores that makes, and the whole machine's CPU use (other work on it shows there).
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fmt, summary } from './stats.mjs';

const RUNS = Number(process.env.BENCH_RUNS ?? 60);
const WARMUP = 5;

if (process.argv[2] === '--worker') await worker(process.argv[3]);
else if (process.argv[2] === '--store') await storeWorker(process.argv[3]);
else await main();

/**
 * The store alone: what every run adds to the shared workspace after the sandbox (its run record and
 * one `executed` audit record, appended under the log's lock), RUNS times, with no sandbox at all.
 */
async function storeWorker(wsDir) {
  const { openAuditLog } = await import('../dist/src/audit/index.js');
  const { writeRunRecord } = await import('../dist/src/host/record.js');
  const { openWorkspace } = await import('../dist/src/workspace/workspace.js');
  const ws = openWorkspace(wsDir);
  const audit = openAuditLog(ws.auditFile);
  process.stdout.write('ready\n');
  await new Promise((r) => process.stdin.once('data', r));
  const samples = [];
  for (let i = 0; i < RUNS * 4; i++) {
    const t0 = performance.now();
    const dir = join(ws.runs, `bench-${process.pid}-${i}`);
    mkdirSync(dir);
    writeRunRecord(dir, { version: 1, sandbox_id: `bench-${process.pid}-${i}`, door: 'cli', verdict: 'PROMOTE', status: 'SUCCESS', started_at: new Date().toISOString(), ended_at: new Date().toISOString() });
    audit.append({ type: 'executed', action_id: `bench-${process.pid}-${i}`, sandbox_id: `bench-${process.pid}-${i}`, detail: { door: 'cli', verdict: 'PROMOTE', status: 'SUCCESS', exit_code: 0 } });
    samples.push({ ms: performance.now() - t0, t: null });
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(`${JSON.stringify({ samples, userMs: 0, sysMs: 0 })}\n`, () => process.exit(0));
}

/** One host process: warm up, say ready, wait for "go" on stdin, run, print the samples as JSON. */
async function worker(wsDir) {
  const { execute } = await import('../dist/src/host/execute.js');
  const { actionFromArgv } = await import('../dist/src/action/from-argv.js');
  const { loadPolicy } = await import('../dist/src/policy/load.js');
  const { openWorkspace } = await import('../dist/src/workspace/workspace.js');
  const ws = openWorkspace(wsDir);
  const policy = loadPolicy(ws.policyFile);
  if (!policy.ok) throw new Error(JSON.stringify(policy.problems));
  const L = policy.value.limits;
  const limits = { wallMs: 10_000, cpuMs: 10_000, memoryBytes: L.memory_mb * 1024 * 1024, diskBytes: L.out_mb * 1024 * 1024, files: L.files, pids: L.pids, stdoutBytes: 64 * 1024, stderrBytes: 64 * 1024 };
  const inputsDir = mkdtempSync(join(tmpdir(), 'airlock-bench-in-'));
  const one = async () => {
    const action = actionFromArgv({ argv: ['/bin/true'], readOnly: [], writable: [], net: [], inputs: [], limits });
    if ('problems' in action) throw new Error(JSON.stringify(action.problems));
    const t0 = performance.now();
    const done = await execute(ws, { action, door: 'cli', approval: { kind: 'operator', operator: 'bench', how: 'terminal' }, inputsDir });
    const ms = performance.now() - t0;
    if (done.kind !== 'ran' || done.outcome.sandboxResult.execution.status !== 'SUCCESS') throw new Error(`run failed: ${JSON.stringify(done.kind === 'ran' ? done.outcome.sandboxResult.execution : done.problems)}`);
    rmSync(done.outcome.runDir, { recursive: true, force: true }); // the workspace would grow by every run (not part of a run)
    return { ms, t: done.outcome.observation.timings ?? null };
  };
  for (let i = 0; i < WARMUP; i++) await one();
  process.stdout.write('ready\n');
  await new Promise((r) => process.stdin.once('data', r));
  const tree0 = treeCpu();
  const samples = [];
  for (let i = 0; i < RUNS; i++) samples.push(await one());
  const tree1 = treeCpu();
  rmSync(inputsDir, { recursive: true, force: true });
  // Exit once written: the host keeps helpers (host ops, Monty pools) that would hold the process open.
  process.stdout.write(`${JSON.stringify({ samples, userMs: tree1.user - tree0.user, sysMs: tree1.sys - tree0.sys })}\n`, () => process.exit(0));
}

/**
 * CPU of this process and of every child it has reaped (bwrap, and through bwrap the sandbox's init
 * and program; the tracer), in ms, user and kernel: /proc/self/stat utime, stime, cutime, cstime.
 */
function treeCpu() {
  const f = readFileSync('/proc/self/stat', 'utf8');
  const x = f.slice(f.lastIndexOf(')') + 2).split(' ').map(Number);
  const tick = 1000 / 100; // USER_HZ
  return { user: (x[11] + x[13]) * tick, sys: (x[12] + x[14]) * tick };
}

/** Busy and total jiffies of the whole machine (/proc/stat), for its CPU use during a phase. */
function cpuTimes() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = f[3] + f[4];
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

async function phase(p, wsDir, env, mode = '--worker') {
  const self = fileURLToPath(import.meta.url);
  const kids = Array.from({ length: p }, () => spawn(process.execPath, [self, mode, wsDir], { env, stdio: ['pipe', 'pipe', 'inherit'] }));
  const outs = kids.map(() => '');
  await Promise.all(kids.map((k, i) => new Promise((resolve, reject) => {
    k.stdout.on('data', (d) => { outs[i] += d; if (outs[i].includes('ready\n')) resolve(); });
    k.once('exit', (code) => reject(new Error(`worker exited with ${code}`)));
  })));
  const c0 = cpuTimes();
  const t0 = performance.now();
  for (const k of kids) k.stdin.write('go\n');
  await Promise.all(kids.map((k) => new Promise((r) => k.once('exit', r))));
  const wall = performance.now() - t0;
  const c1 = cpuTimes();
  const results = outs.map((o) => JSON.parse(o.split('\n').find((l) => l.startsWith('{'))));
  const samples = results.flatMap((r) => r.samples);
  const ms = summary(samples.map((s) => s.ms));
  const med = (k) => summary(samples.filter((s) => s.t).map((s) => s.t[k])).p50;
  const parts = { staging: med('stagingMs'), launch: med('launchMs'), program: med('programMs'), observe: med('observeMs') };
  const rest = summary(samples.filter((s) => s.t).map((s) => s.ms - s.t.stagingMs - s.t.launchMs - s.t.programMs - s.t.observeMs)).p50;
  const userMs = results.reduce((a, r) => a + r.userMs, 0);
  const sysMs = results.reduce((a, r) => a + r.sysMs, 0);
  const cpuMsPerRun = (userMs + sysMs) / samples.length;
  const sysShare = sysMs / (userMs + sysMs);
  // The cores the runs used themselves (a share of the machine's), against all of the machine's use.
  const treeCores = (userMs + sysMs) / wall;
  const machineBusy = (c1.busy - c0.busy) / (c1.total - c0.total);
  return { p, runs: samples.length, runsPerSec: (samples.length / wall) * 1000, p50: ms.p50, p99: ms.p99, parts, rest, cpuMsPerRun, sysShare, treeCores, machineBusy };
}

async function main() {
  const top = mkdtempSync(join(tmpdir(), 'airlock-bench-conc-'));
  chmodSync(top, 0o711);
  const tmp = join(top, 'tmp');
  mkdirSync(tmp, { mode: 0o711 });
  chmodSync(tmp, 0o711);
  const { openWorkspace } = await import('../dist/src/workspace/workspace.js');
  const ws = openWorkspace(join(top, 'ws'));
  const env = { ...process.env, TMPDIR: tmp };
  console.log(`${new Date().toISOString()}  ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), load average before: ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  console.log(`${RUNS} runs of /bin/true per process (after ${WARMUP} warm-up runs each), host core path, one workspace, one TMPDIR`);
  const rows = [];
  for (const p of [1, 2, 4]) {
    const r = await phase(p, ws.root, env);
    rows.push(r);
    console.log(
      `${p} process${p > 1 ? 'es' : '  '}  ${fmt(r.runsPerSec, 1).padStart(6)} runs/s  p50 ${fmt(r.p50, 1)} ms  p99 ${fmt(r.p99, 1)} ms  | p50 staging ${fmt(r.parts.staging, 1)} launch ${fmt(r.parts.launch, 1)} program ${fmt(r.parts.program, 1)} observe ${fmt(r.parts.observe, 1)} rest ${fmt(r.rest, 1)} ms  | CPU ${fmt(r.cpuMsPerRun, 1)} ms/run (${fmt(r.sysShare * 100, 0)}% kernel), ${fmt(r.treeCores, 2)} of ${cpus().length} cores; machine ${fmt(r.machineBusy * 100, 0)}% busy`,
    );
  }
  const st = await phase(4, ws.root, env, '--store');
  console.log(`the store alone (run record + audit append under its lock), 4 processes: ${fmt(st.runsPerSec, 0)} runs/s, p50 ${fmt(st.p50, 2)} ms, p99 ${fmt(st.p99, 2)} ms per run`);
  const [one, , four] = rows;
  console.log(`scaling 1 -> 4 processes: ${fmt(four.runsPerSec / one.runsPerSec, 2)}x runs/s; p50 per run ${fmt(one.p50, 1)} -> ${fmt(four.p50, 1)} ms`);
  rmSync(top, { recursive: true, force: true });
}
