// The Monty lane: Python code run in @pydantic/monty, in a child Node process the host measures.
//
// Why a child process: Monty is native code in our address space; a panic, an endless loop in native
// code or a runaway allocation would take the service with it. The child has its own heap, is killed
// with SIGKILL on any limit, and everything in the observation is measured here, in the parent:
// wall time (our timer), CPU and memory (/proc/<pid>/stat and status, polled and read once more at
// the end while the child idles), /out (a diff of the host dir). The child's control messages only
// classify how the program ended, and a forged classification could only make the result worse
// (see docs/monty.md).
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, constants, existsSync, fstatSync, lstatSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, closeSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Readable } from 'node:stream';
import type { Problem } from '../../contracts/problem.js';
import type { Action } from '../../action/action.js';
import { StreamCapture } from '../ns/capture.js';
import { diffSnapshots, DiffBudget, DiffBudgetExceeded, OBSERVE_MARGIN_MS, snapshotTree } from '../observe/fs-diff.js';
import type { FsChange, LimitEnforcement, LimitName, NsExit, NsHostFacts, NsResources, NsRunObservation, NsStatus } from '../types.js';
import type { LaneOutcome } from './ns.js';
import type { MontyEndMessage, MontyJob } from './monty-worker.js';

export const montyLaneRules = [
  { code: 'MONTY_LIMIT_INVALID', spec: 'Every limit of a run is a positive integer chosen by the request and capped by the policy.', fix: 'Give positive integer limits (wallMs, cpuMs, memoryBytes, diskBytes, stdoutBytes, stderrBytes).' },
  { code: 'MONTY_INPUT_NAME', spec: 'Inputs are files directly under /in: one per name, [A-Za-z0-9_][A-Za-z0-9._-]*.', fix: 'Rename the input (no slash, no leading dot) and declare each name once.' },
  { code: 'MONTY_INPUT_UNREADABLE', spec: 'Declared inputs are read from the inputs folder before the run.', fix: 'Put each declared input, as a regular file, in the inputs folder.' },
  { code: 'MONTY_INPUT_CHANGED', spec: 'What the program reads at /in is what was approved: the copy is hashed again before the run.', fix: 'An input changed after it was checked: use the approved file, or draft a new request.' },
  { code: 'MONTY_OUTDIR', spec: 'The lane writes /out into a fresh, empty host folder.', fix: 'Give an outDir that does not exist yet or is empty.' },
  { code: 'MONTY_WORKER_MISSING', spec: 'The Monty lane runs its worker script in a child process.', fix: 'Rebuild Airlock (npm run build): monty-worker.js must sit beside monty.js, or beside the bundle.' },
  { code: 'MONTY_CHILD_FAILED', spec: 'A Monty child that dies before the program starts is a sandbox error, not a program failure.', fix: 'Check that @pydantic/monty is installed for this platform (`node -e "import(\'@pydantic/monty\')"`).' },
] as const;

/** Knobs Monty has and an Action does not carry (yet): the policy may set them. */
export interface MontyLaneOptions {
  /** Python call-depth limit (Monty's default is 1000; deep limits cost quadratic time on unwinding). */
  maxRecursionDepth?: number;
  /** Cap on heap allocations (none by default: memory and time bound the program already). */
  maxAllocations?: number;
  /** Another worker script (tests use it to simulate a crashing child). */
  workerPath?: string;
}

/** What only the Monty lane knows, carried beside the shared observation fields. */
export interface MontyFacts {
  /** JSON of the last expression's value (null: None or no value), capped at stdoutBytes. */
  resultJson: string | null;
  resultTruncated: boolean;
  /** The Python exception that ended the program, as Monty reported it (null on success or kill). */
  exception: { kind: 'syntax' | 'runtime' | 'typing' | 'internal'; typeName: string; message: string } | null;
  /** How the run was isolated: the judge's sandbox requirement for this lane. */
  isolation: {
    /** true when the program ran in a separate, killable Monty child process that ran to a known end. */
    isolatedChild: boolean;
    childPid: number | null;
    interpreter: string;
    nodeFlags: string[];
    montyLimits: { maxMemory: number; maxRecursionDepth: number; maxAllocations: number | null; maxDurationSecs: string; outWriteBytes: number };
  };
  /** CPU the child used before the program started (Node and Monty start-up), excluded from cpuUserMs/cpuSystemMs. */
  startupCpuMs: number | null;
  /** Why the side effects are empty lists (nothing was traced: there is nothing to trace). */
  sideEffectsBasis: string;
}

export type MontyRunObservation = NsRunObservation & { monty: MontyFacts };

const INPUT_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const LIMIT_NAMES: LimitName[] = ['wallMs', 'cpuMs', 'memoryBytes', 'pids', 'outBytes', 'tmpBytes', 'files', 'stdoutBytes', 'stderrBytes'];
const POLL_MS = 10;
/** Linux reports /proc times in USER_HZ ticks, 100 per second on every architecture Node supports. */
const TICK_MS = 10;
const SCRIPT_NAME = 'main.py';
const DEFAULT_RECURSION = 1000;
const MAX_RECURSION = 10_000;
// Values the shared host-facts and exit types do not list yet (reported to the maintainer of types.ts).
const OUT_MECHANISM = 'monty-mount-write-cap' as unknown as NsHostFacts['outMechanism'];
const EXIT_SOURCE = 'monty-worker' as unknown as NsExit['source'];
const SIDE_EFFECTS_BASIS =
  'Monty has no filesystem (beyond the /in and /out mounts), environment, network, subprocess or signal API, and no ctypes or ' +
  'foreign code: the program cannot ask for a system call, so there is nothing to trace and the lists are empty by construction.';

/** The worker script: beside this module (tsc output) or beside/above it in the esbuild bundle. */
export function montyWorkerPath(): string | null {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const p of [join(here, 'monty-worker.js'), join(here, '..', 'monty-worker.js'), join(here, 'lanes', 'monty-worker.js')]) if (existsSync(p)) return p;
  return null;
}

interface ProcSample {
  cpuUserMs: number;
  cpuSystemMs: number;
  rssBytes: number;
  hwmBytes: number;
}

/** CPU and memory of a live process from /proc (null once it is gone or on a host without /proc). */
function sampleProc(pid: number): ProcSample | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
    const s = { cpuUserMs: Number(rest[11]) * TICK_MS, cpuSystemMs: Number(rest[12]) * TICK_MS, rssBytes: kb('VmRSS'), hwmBytes: kb('VmHWM') };
    return Object.values(s).every(Number.isFinite) ? s : null;
  } catch {
    return null;
  }
}

/** Copies one input into the staging /in (0444) and hashes the copy: what Monty reads is what we hashed. */
function stageInput(src: string, dest: string): { sha256: string; bytes: number } {
  const fd = openSync(src, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    if (!fstatSync(fd).isFile()) throw new Error('not a regular file');
    const h = createHash('sha256');
    const out = openSync(dest, 'wx', 0o600);
    let bytes = 0;
    try {
      const buf = Buffer.allocUnsafe(1 << 20);
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, null);
        if (n === 0) break;
        h.update(buf.subarray(0, n));
        writeFileSync(out, buf.subarray(0, n));
        bytes += n;
      }
    } finally {
      closeSync(out);
    }
    chmodSync(dest, 0o444);
    return { sha256: h.digest('hex'), bytes };
  } finally {
    closeSync(fd);
  }
}

function regularBytes(dir: string): number {
  let total = 0;
  for (const n of readdirSync(dir)) {
    const st = lstatSync(join(dir, n));
    if (st.isDirectory()) total += regularBytes(join(dir, n));
    else if (st.isFile()) total += st.size;
  }
  return total;
}

function limitEnforcement(memoryBackstop: number): LimitEnforcement[] {
  const by: Record<LimitName, string> = {
    wallMs: 'host timer + SIGKILL of the Monty child (Monty\'s own time limit gets the remaining budget)',
    cpuMs: `host polls /proc/<pid>/stat every ${POLL_MS} ms (10 ms ticks) + SIGKILL of the child`,
    memoryBytes: `Monty heap limit (maxMemory) + host polls the child's RSS every ${POLL_MS} ms, SIGKILL past ${memoryBackstop} bytes above its start-up RSS`,
    pids: 'Monty has no process or thread API: the program cannot create any',
    outBytes: 'Monty /out mount write cap (cumulative bytes written) + post-check of the total',
    tmpBytes: 'Monty mounts only /in and /out: there is no /tmp to write',
    files: 'post-check: the host\'s /out diff stops past the cap and the run is over its limits',
    stdoutBytes: 'host capture cap (kept bytes; the rest counted and hashed)',
    stderrBytes: 'host capture cap (kept bytes; the rest counted and hashed)',
  };
  return LIMIT_NAMES.map((limit) => ({ limit, enforcedBy: by[limit] }));
}

function hostFacts(memoryBackstop: number): NsHostFacts {
  return {
    bwrapVersion: 'n/a (monty)',
    cgroupVersion: null,
    hostUid: process.getuid?.() ?? -1,
    sandboxUid: process.getuid?.() ?? -1,
    seccomp: false,
    syscallTracer: null,
    outMechanism: OUT_MECHANISM,
    limits: limitEnforcement(memoryBackstop),
  };
}

function nullResources(reason: string): NsResources {
  const r: NsResources = { cpuUserMs: null, cpuSystemMs: null, peakMemoryBytes: null, diskWriteBytes: null, networkBytesIn: null, networkBytesOut: null, wallMs: null, unmeasured: {}, basis: {} };
  for (const k of ['cpuUserMs', 'cpuSystemMs', 'peakMemoryBytes', 'diskWriteBytes', 'networkBytesIn', 'networkBytesOut', 'wallMs'] as const) r.unmeasured[k] = reason;
  return r;
}

function emptySideEffects(pid: number | null): NsRunObservation['sideEffects'] {
  return { bwrapPid: null, programPid: pid, processesSpawned: { count: 0, threads: 0, executables: [], outlivedProgram: 0 }, signalsSent: [], networkAttempts: [], privilegedSyscalls: [], deviceAccess: [], fileAccess: [], unparsedLines: 0 };
}

function errorObservation(runId: string, problems: Problem[], started: Date, facts: Partial<MontyFacts> = {}): MontyRunObservation {
  const now = new Date();
  const empty = new StreamCapture(0).result();
  return {
    runId,
    startedAt: started.toISOString(),
    endedAt: now.toISOString(),
    wallMs: now.getTime() - started.getTime(),
    exit: { code: null, signal: null, source: 'none' },
    status: 'SANDBOX_ERROR',
    reason: problems.map((p) => p.message).join('; '),
    limitsExceeded: [],
    stdout: empty,
    stderr: empty,
    resources: nullResources('the program did not run'),
    sideEffects: null,
    sideEffectsUnavailable: 'the program did not run',
    fs: { out: null, outError: 'the program did not run', scopes: [] },
    inputs: [],
    host: hostFacts(0),
    problems,
    monty: {
      resultJson: null,
      resultTruncated: false,
      exception: null,
      isolation: { isolatedChild: false, childPid: null, interpreter: `@pydantic/monty in Node ${process.version}`, nodeFlags: [], montyLimits: { maxMemory: 0, maxRecursionDepth: 0, maxAllocations: null, maxDurationSecs: 'n/a', outWriteBytes: 0 } },
      startupCpuMs: null,
      sideEffectsBasis: SIDE_EFFECTS_BASIS,
      ...facts,
    },
  };
}

function checkLimits(action: Action, opts: MontyLaneOptions): Problem[] {
  const p: Problem[] = [];
  const l = action.limits as unknown as Record<string, unknown>;
  for (const k of ['wallMs', 'cpuMs', 'memoryBytes', 'diskBytes', 'stdoutBytes', 'stderrBytes']) {
    const v = l[k];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) p.push({ code: 'MONTY_LIMIT_INVALID', message: `limits.${k} must be a positive integer (got ${String(v).slice(0, 40)})`, path: `limits.${k}` });
  }
  const rec = opts.maxRecursionDepth;
  if (rec !== undefined && (!Number.isSafeInteger(rec) || rec < 1 || rec > MAX_RECURSION)) p.push({ code: 'MONTY_LIMIT_INVALID', message: `maxRecursionDepth must be an integer in 1..${MAX_RECURSION} (got ${rec})` });
  const alloc = opts.maxAllocations;
  if (alloc !== undefined && (!Number.isSafeInteger(alloc) || alloc < 1)) p.push({ code: 'MONTY_LIMIT_INVALID', message: `maxAllocations must be a positive integer (got ${alloc})` });
  return p;
}

/** How the program ended, from Monty's error; a forged one only makes the result worse. */
function classify(end: MontyEndMessage, limits: Action['limits']): { status: NsStatus; limit: LimitName | null; reason: string } {
  if (end.ok) return { status: 'SUCCESS', limit: null, reason: 'the program completed' };
  const what = `${end.typeName}: ${end.message}`.slice(0, 300);
  if (end.kind === 'runtime' && end.typeName === 'TimeoutError' && /^time limit exceeded/.test(end.message)) return { status: 'TIMEOUT', limit: 'wallMs', reason: `wall time ${limits.wallMs} ms exceeded: Monty stopped the program (${what})` };
  if (end.kind === 'runtime' && end.typeName === 'MemoryError' && /^memory limit exceeded/.test(end.message)) return { status: 'RESOURCE_KILLED', limit: 'memoryBytes', reason: `memory limit ${limits.memoryBytes} bytes: Monty stopped the program (${what})` };
  if (end.kind === 'runtime' && end.typeName === 'MemoryError' && /^allocation limit exceeded/.test(end.message)) return { status: 'RESOURCE_KILLED', limit: 'memoryBytes', reason: `allocation limit: Monty stopped the program (${what})` };
  if (end.kind === 'runtime' && end.typeName === 'OSError' && /^disk write limit of \d+ bytes exceeded/.test(end.message)) return { status: 'FAILURE', limit: 'outBytes', reason: `output size limit ${limits.diskBytes} bytes: a write to /out was refused and the program ended with it (${what})` };
  if (end.kind === 'internal') return { status: 'SANDBOX_ERROR', limit: null, reason: `the Monty worker failed: ${what}` };
  return { status: 'FAILURE', limit: null, reason: `the program raised ${what}` };
}

interface Kill {
  status: NsStatus;
  /** null: not a limit (a caller's cancel). */
  limit: LimitName | null;
  reason: string;
}

/** Where a Monty run reads and writes, and the caller's cancel. */
export interface MontyLaneContext {
  inputsDir: string;
  outDir: string;
  /** Aborted by the caller (e.g. a UTP cancel): the child is killed, the run ends POLICY_ABORTED. */
  signal?: AbortSignal;
}

/**
 * Runs a `code` Action in the Monty lane. `inputsDir` holds the action's inputs by name, already
 * hash-checked by the caller (the copies are checked again); `outDir` receives /out (created; must be empty).
 * Never throws: every failure is a SANDBOX_ERROR observation.
 */
export async function runInMontyLane(action: Action, ctx: MontyLaneContext, opts: MontyLaneOptions = {}): Promise<LaneOutcome> {
  if (action.run.kind !== 'code' || action.run.language !== 'python') {
    return { ok: false, problems: [{ code: 'LANE_ACTION_NOT_RUNNABLE', message: `the monty lane runs Python code; ${action.id} is a ${action.run.kind} action (use the ns lane)` }] };
  }
  const argv = ['monty', SCRIPT_NAME];
  const observation = await runMonty(action, action.run.code, ctx, opts);
  return { ok: true, observation, argv };
}

async function runMonty(action: Action, code: string, ctx: MontyLaneContext, opts: MontyLaneOptions): Promise<MontyRunObservation> {
  const runId = `monty-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
  const started = new Date();
  const problems = checkLimits(action, opts);
  const names = new Set<string>();
  action.inputs.forEach((i, n) => {
    if (!INPUT_NAME.test(i.name)) problems.push({ code: 'MONTY_INPUT_NAME', message: `input name "${i.name.slice(0, 100)}" must match [A-Za-z0-9_][A-Za-z0-9._-]* (no slash, no leading dot)`, path: `inputs[${n}].name` });
    else if (names.has(i.name)) problems.push({ code: 'MONTY_INPUT_NAME', message: `input name "${i.name}" is declared twice: /in holds one file per name`, path: `inputs[${n}].name` });
    names.add(i.name);
  });
  if (problems.length > 0) return errorObservation(runId, problems, started);
  const worker = opts.workerPath ?? montyWorkerPath();
  if (!worker) return errorObservation(runId, [{ code: 'MONTY_WORKER_MISSING', message: `monty-worker.js not found beside ${fileURLToPath(import.meta.url)}: rebuild Airlock` }], started);
  try {
    mkdirSync(ctx.outDir, { recursive: true });
    if (!lstatSync(ctx.outDir).isDirectory() || readdirSync(ctx.outDir).length > 0) throw new Error('it is not an empty directory');
  } catch (e) {
    return errorObservation(runId, [{ code: 'MONTY_OUTDIR', message: `cannot use ${ctx.outDir} as /out: ${(e as Error).message}` }], started);
  }

  // ---- /in: a private copy of each declared input, hashed as copied ----
  const staging = mkdtempSync(join(tmpdir(), 'airlock-monty-'));
  try {
    const inDir = join(staging, 'in');
    mkdirSync(inDir, { mode: 0o700 });
    const inputs: NsRunObservation['inputs'] = [];
    for (const i of action.inputs) {
      let got: { sha256: string; bytes: number };
      try {
        got = stageInput(join(ctx.inputsDir, i.name), join(inDir, i.name));
      } catch (e) {
        return errorObservation(runId, [{ code: 'MONTY_INPUT_UNREADABLE', message: `input ${i.name} cannot be read from ${ctx.inputsDir}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, path: `inputs.${i.name}` }], started);
      }
      if (got.sha256 !== i.sha256) return errorObservation(runId, [{ code: 'MONTY_INPUT_CHANGED', message: `input ${i.name} has sha256 ${got.sha256} now, the action declares ${i.sha256}`, path: `inputs.${i.name}` }], started);
      inputs.push({ name: i.name, sha256: got.sha256, bytes: got.bytes });
    }
    chmodSync(inDir, 0o500);
    return await execute(runId, started, action, code, { worker, inDir: action.inputs.length > 0 ? inDir : null, outDir: ctx.outDir, inputs, ...(ctx.signal ? { signal: ctx.signal } : {}) }, opts);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

async function execute(
  runId: string,
  started: Date,
  action: Action,
  code: string,
  run: { worker: string; inDir: string | null; outDir: string; inputs: NsRunObservation['inputs']; signal?: AbortSignal },
  opts: MontyLaneOptions,
): Promise<MontyRunObservation> {
  const limits = action.limits;
  const memoryBackstop = limits.memoryBytes + Math.max(Math.floor(limits.memoryBytes / 2), 32 << 20);
  const job: MontyJob = {
    code,
    scriptName: SCRIPT_NAME,
    inDir: run.inDir,
    outDir: run.outDir,
    outWriteBytes: limits.diskBytes,
    wallMs: limits.wallMs,
    limits: { maxMemory: limits.memoryBytes, maxRecursionDepth: opts.maxRecursionDepth ?? DEFAULT_RECURSION, maxAllocations: opts.maxAllocations ?? null },
    resultBytes: limits.stdoutBytes,
  };
  // V8's own heap holds little (print strings, the result's JS form): bound it apart from Monty's.
  const nodeFlags = [`--max-old-space-size=${Math.max(64, Math.ceil(limits.memoryBytes / (1 << 20)) + 64)}`, '--no-warnings'];
  const t0 = performance.now();
  // No inherited environment: nothing of the service's (tokens, NODE_OPTIONS) reaches the child.
  const child = spawn(process.execPath, [...nodeFlags, run.worker], { stdio: ['pipe', 'pipe', 'pipe', 'pipe'], env: {}, cwd: '/' });
  const pid = child.pid ?? null;
  const out = new StreamCapture(limits.stdoutBytes);
  const err = new StreamCapture(limits.stderrBytes);
  out.attach(child.stdout);
  err.attach(child.stderr);
  child.stdin?.on('error', () => undefined);

  let kill: Kill | null = null;
  let startSample: ProcSample | null = null;
  let lastSample: ProcSample | null = null;
  let programStarted = false;
  let end: MontyEndMessage | null = null;
  let protocolError: string | null = null;
  let spawnError: string | null = null;
  let graceTimer: NodeJS.Timeout | null = null;

  const killChild = (k: Kill): void => {
    if (kill || end) return;
    kill = k;
    child.kill('SIGKILL');
  };
  const finish = (): void => {
    // The program is over: take the final figures while the child idles, then let it exit.
    const s = pid !== null ? sampleProc(pid) : null;
    if (s) lastSample = s;
    child.stdin?.end();
    graceTimer = setTimeout(() => child.kill('SIGKILL'), 1000);
  };

  const control = child.stdio[3] as Readable;
  let ctl = '';
  control.setEncoding('utf8');
  control.on('error', () => undefined);
  control.on('data', (chunk: string) => {
    if (end || protocolError) return;
    ctl += chunk;
    // The end message carries the result JSON (<= stdoutBytes bytes, up to 6x when escaped).
    if (ctl.length > limits.stdoutBytes * 6 + (64 << 10)) {
      protocolError = 'the control channel overflowed';
      return void child.kill('SIGKILL');
    }
    let nl: number;
    while ((nl = ctl.indexOf('\n')) >= 0 && !end) {
      const line = ctl.slice(0, nl);
      ctl = ctl.slice(nl + 1);
      let msg: { t?: unknown };
      try {
        msg = JSON.parse(line) as { t?: unknown };
      } catch {
        protocolError = 'the worker sent a malformed control message';
        return void child.kill('SIGKILL');
      }
      if (msg.t === 'start' && !programStarted) {
        programStarted = true;
        startSample = pid !== null ? sampleProc(pid) : null;
        lastSample = startSample;
      } else if (msg.t === 'end' && programStarted) {
        end = msg as MontyEndMessage;
        clearTimeout(wall);
        finish();
      } else {
        protocolError = `unexpected control message ${JSON.stringify(msg).slice(0, 80)}`;
        return void child.kill('SIGKILL');
      }
    }
  });

  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('error', (e) => {
      spawnError = e.message;
      resolve({ code: null, signal: null });
    });
    child.on('close', (c, s) => resolve({ code: c, signal: s }));
  });
  child.stdin?.write(JSON.stringify(job) + '\n');

  const wall = setTimeout(() => killChild({ status: 'TIMEOUT', limit: 'wallMs', reason: `wall time ${limits.wallMs} ms exceeded: killed by the host` }), limits.wallMs);
  // A caller's cancel ends the run as the ns lane does: a host decision, not a limit.
  const onCancel = () => killChild({ status: 'POLICY_ABORTED', limit: null, reason: 'canceled by the caller: killed by the host' });
  if (run.signal?.aborted) onCancel();
  else run.signal?.addEventListener('abort', onCancel, { once: true });
  const poll = setInterval(() => {
    if (pid === null || end || kill) return;
    const s = sampleProc(pid);
    if (!s) return;
    lastSample = s;
    if (!startSample) return;
    const cpu = s.cpuUserMs + s.cpuSystemMs - startSample.cpuUserMs - startSample.cpuSystemMs;
    if (cpu > limits.cpuMs) killChild({ status: 'RESOURCE_KILLED', limit: 'cpuMs', reason: `CPU time limit ${limits.cpuMs} ms exceeded (${cpu} ms): killed by the host` });
    else if (s.rssBytes - startSample.rssBytes > memoryBackstop) killChild({ status: 'RESOURCE_KILLED', limit: 'memoryBytes', reason: `memory limit ${limits.memoryBytes} bytes: the child's RSS grew by ${s.rssBytes - startSample.rssBytes} bytes (backstop ${memoryBackstop}); killed by the host` });
  }, POLL_MS);

  const exit = await exited;
  const wallMs = performance.now() - t0;
  run.signal?.removeEventListener('abort', onCancel);
  clearTimeout(wall);
  clearInterval(poll);
  if (graceTimer) clearTimeout(graceTimer);
  const ended = new Date();

  // ---- /out ----
  const limitsExceeded = new Set<LimitName>();
  let outChanges: FsChange[] | null = null;
  let outError: string | undefined;
  let outBytes: number | null = null;
  try {
    const budget = new DiffBudget({ files: limits.files, bytes: limits.diskBytes, deadline: started.getTime() + limits.wallMs + OBSERVE_MARGIN_MS });
    outChanges = diffSnapshots({ root: run.outDir, entries: new Map() }, await snapshotTree(run.outDir, budget), { mountPoint: '/out' });
    outBytes = regularBytes(run.outDir);
    if (outBytes > limits.diskBytes) limitsExceeded.add('outBytes');
  } catch (e) {
    if (e instanceof DiffBudgetExceeded && e.limit !== 'time') limitsExceeded.add(e.limit);
    outError = e instanceof DiffBudgetExceeded ? `the /out diff stopped: ${e.message}` : `the /out diff failed: ${(e as Error).message}`;
  }

  // ---- status ----
  const k = kill as Kill | null;
  const e = end as MontyEndMessage | null;
  const pe = protocolError as string | null;
  const se = spawnError as string | null;
  let status: NsStatus;
  let reason: string;
  let exitCode: number | null = null;
  const problems: Problem[] = [];
  if (se !== null || (!programStarted && !k)) {
    status = 'SANDBOX_ERROR';
    reason = se !== null ? `cannot start the Monty child: ${se}` : `the Monty child ended before the program started (${exit.signal ?? `exit ${exit.code}`}): ${err.result().bytes.toString('utf8').slice(0, 300).trim()}`;
    problems.push({ code: 'MONTY_CHILD_FAILED', message: reason });
  } else if (k) {
    status = k.status;
    reason = k.reason;
    if (k.limit) limitsExceeded.add(k.limit);
  } else if (pe !== null) {
    status = 'SANDBOX_ERROR';
    reason = `the Monty worker broke the protocol: ${pe}`;
    problems.push({ code: 'MONTY_CHILD_FAILED', message: reason });
  } else if (e) {
    const c = classify(e, limits);
    status = c.status;
    reason = c.reason;
    if (c.limit) limitsExceeded.add(c.limit);
    exitCode = e.ok ? 0 : 1;
    if (status === 'SANDBOX_ERROR') problems.push({ code: 'MONTY_CHILD_FAILED', message: reason });
  } else {
    // The child died on its own while the program ran: Monty (or V8) crashed under it.
    status = 'FAILURE';
    reason = `the Monty child died while the program ran (${exit.signal ?? `exit ${exit.code}`}); see stderr`;
    const sS = startSample as ProcSample | null;
    const sL = lastSample as ProcSample | null;
    if (sS && sL && sL.hwmBytes - sS.rssBytes > memoryBackstop) {
      status = 'RESOURCE_KILLED';
      limitsExceeded.add('memoryBytes');
      reason += `; its RSS had grown past the memory backstop (${memoryBackstop} bytes)`;
    }
  }

  // ---- resources (parent-measured) ----
  const s0 = startSample as ProcSample | null;
  const s1 = lastSample as ProcSample | null;
  const resources: NsResources = {
    cpuUserMs: s0 && s1 ? s1.cpuUserMs - s0.cpuUserMs : null,
    cpuSystemMs: s0 && s1 ? s1.cpuSystemMs - s0.cpuSystemMs : null,
    peakMemoryBytes: s1 ? s1.hwmBytes : null,
    diskWriteBytes: outBytes,
    networkBytesIn: 0,
    networkBytesOut: 0,
    wallMs,
    unmeasured: {},
    basis: {
      cpuUserMs: `read by the host from /proc/<pid>/stat of the Monty child (10 ms ticks) when the program started and when it ended${end ? '' : ' (last poll before the kill)'}; Node and Monty start-up excluded`,
      cpuSystemMs: 'as cpuUserMs',
      peakMemoryBytes: "the Monty child's peak RSS (VmHWM from /proc/<pid>/status), Node itself included",
      diskWriteBytes: 'bytes of regular files left in /out at the end (Monty also caps the cumulative bytes written through /out)',
      networkBytesIn: 'Monty has no network API: 0 by construction',
      networkBytesOut: 'Monty has no network API: 0 by construction',
      wallMs: 'host clock from spawning the Monty child to its end',
    },
  };
  for (const f of ['cpuUserMs', 'cpuSystemMs', 'peakMemoryBytes'] as const) {
    if (resources[f] === null) resources.unmeasured[f] = programStarted ? 'the child was not readable in /proc (gone, or a host without /proc)' : 'the program did not start';
  }
  if (outBytes === null) resources.unmeasured.diskWriteBytes = outError ?? 'the /out diff failed';
  if (resources.cpuUserMs !== null && resources.cpuSystemMs !== null && resources.cpuUserMs + resources.cpuSystemMs > limits.cpuMs) limitsExceeded.add('cpuMs');

  const sandboxError = status === 'SANDBOX_ERROR';
  return {
    runId,
    startedAt: started.toISOString(),
    endedAt: ended.toISOString(),
    wallMs,
    exit: exitCode !== null ? { code: exitCode, signal: null, source: EXIT_SOURCE } : { code: exit.code, signal: exit.signal, source: 'none' },
    status,
    reason,
    limitsExceeded: LIMIT_NAMES.filter((l) => limitsExceeded.has(l)),
    stdout: out.result(),
    stderr: err.result(),
    resources,
    sideEffects: programStarted ? emptySideEffects(pid) : null,
    ...(programStarted ? {} : { sideEffectsUnavailable: 'the program did not start' }),
    fs: { out: outChanges, ...(outError ? { outError } : {}), scopes: [] },
    inputs: run.inputs,
    host: hostFacts(memoryBackstop),
    problems: sandboxError ? (problems.length > 0 ? problems : [{ code: 'MONTY_CHILD_FAILED', message: reason }]) : [],
    monty: {
      resultJson: e?.ok ? e.resultJson : null,
      resultTruncated: e?.ok ? e.resultTruncated : false,
      exception: e && !e.ok ? { kind: e.kind, typeName: e.typeName, message: e.message.slice(0, 2000) } : null,
      isolation: {
        isolatedChild: programStarted && !sandboxError,
        childPid: pid,
        interpreter: `@pydantic/monty in Node ${process.version} (child process)`,
        nodeFlags,
        montyLimits: { maxMemory: job.limits.maxMemory, maxRecursionDepth: job.limits.maxRecursionDepth, maxAllocations: job.limits.maxAllocations, maxDurationSecs: 'what is left of wallMs when the program starts', outWriteBytes: job.outWriteBytes },
      },
      startupCpuMs: s0 ? s0.cpuUserMs + s0.cpuSystemMs : null,
      sideEffectsBasis: SIDE_EFFECTS_BASIS,
    },
  };
}
