// The Monty lane: Python code run in @pydantic/monty by a warm, sandboxed worker process.
//
// Why a separate process, and why a sandbox around it: Monty is native code; a panic, an endless loop
// in native code or a runaway allocation must take a worker with it, never the service; and the
// interpreter is the program's only boundary inside that process, so the process itself is locked
// down (monty-sandbox.ts: bwrap as the sandbox user, no network, a read-only root, a seccomp allowlist, its
// own cgroup) in case it is ever escaped. Workers are started ahead of need and serve many runs
// (monty-pool.ts), each in a new Monty instance over its own /in and /out (monty-worker.ts); a
// worker that breached a limit, timed out, crashed, broke the protocol or served its runs is replaced.
// Everything in the observation is measured here, by the host (monty-exec.ts): wall time (our timer),
// CPU (the worker's cgroup or /proc before and after), peak memory (VmHWM reset before the run), /out
// (written by the host from what the worker sends, then diffed). The worker's end message only
// classifies how the program ended, and a forged classification could only make the result worse
// (see docs/monty.md).
import { randomBytes } from 'node:crypto';
import { constants as osConstants } from 'node:os';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Problem } from '../../base/problem.js';
import type { Action } from '../../action/action.js';
import { StreamCapture } from '../ns/capture.js';
import { outDirProblem } from '../ns/outputs.js';
import { diffSnapshots, DiffBudget, DiffBudgetExceeded, OBSERVE_MARGIN_MS, snapshotTree } from '../observe/fs-diff.js';
import type { FsChange, LimitEnforcement, LimitName, RunExit, HostFacts, Resources, Observation, RunStatus } from '../types.js';
import type { LaneOutcome } from './ns.js';
import { execOnPool, POLL_MS, type ExecOutcome } from './monty-exec.js';
import { configureMontyPools, montyPool } from './monty-pool.js';
import type { MontyEndMessage, MontyErrorKind } from './monty-protocol.js';
import type { MontySandboxFacts } from './monty-sandbox.js';


export const montyLaneRules = [
  { code: 'MONTY_LIMIT_INVALID', spec: 'Every limit of a run is a positive integer chosen by the request and capped by the policy.', fix: 'Give positive integer limits (wallMs, cpuMs, memoryBytes, diskBytes, files, stdoutBytes, stderrBytes).' },
  { code: 'MONTY_INPUT_NAME', spec: 'Inputs are files directly under /in: one per name, [A-Za-z0-9_][A-Za-z0-9._-]*.', fix: 'Rename the input (no slash, no leading dot) and declare each name once.' },
  { code: 'MONTY_INPUT_UNREADABLE', spec: 'Declared inputs are read from the inputs folder before the run.', fix: 'Put each declared input, as a regular file, in the inputs folder.' },
  { code: 'MONTY_INPUT_CHANGED', spec: 'What the program reads at /in is what was approved: every byte is hashed as it is handed to the worker, before the program starts.', fix: 'An input changed after it was checked: use the approved file, or draft a new request.' },
  { code: 'MONTY_OUTDIR', spec: 'The lane writes /out into a fresh, empty host folder.', fix: 'Give an outDir that does not exist yet or is empty.' },
  { code: 'MONTY_WORKER_MISSING', spec: 'The Monty lane runs its worker script in a child process.', fix: 'Rebuild Airlock (npm run build): monty-worker.js must sit beside monty.js, or beside the bundle.' },
  { code: 'MONTY_CHILD_FAILED', spec: 'A Monty worker that dies before the program starts, or breaks the protocol, is a sandbox error, not a program failure.', fix: 'Check that @pydantic/monty is installed for this platform (`node -e "import(\'@pydantic/monty\')"`) and read the worker\'s stderr in the reason.' },
  { code: 'MONTY_SANDBOX_FAILED', spec: 'A Monty worker runs inside bwrap as an unprivileged uid, in its own cgroup, under a seccomp allowlist.', fix: 'Run `airlock doctor`; the worker\'s files (dist/, node_modules/@pydantic) must be readable by every user, or the service must be root (it then mirrors them).' },
  { code: 'MONTY_CANCELED', spec: 'A caller\'s cancel ends a run that still waits for a free worker: nothing ran (POLICY_ABORTED).', fix: 'None: the caller canceled the run.' },
] as const;

/** Knobs Monty has and an Action does not carry (yet): the policy may set them. */
export interface MontyLaneOptions {
  /** Python call-depth limit (Monty's default is 1000; deep limits cost quadratic time on unwinding). */
  maxRecursionDepth?: number;
  /** Cap on heap allocations (none by default: memory and time bound the program already). */
  maxAllocations?: number;
  /** Another worker script, run by a pool of its own in the same sandbox (tests: crashing, lying or hostile workers). */
  workerPath?: string;
}

type MontyLimits = { maxMemory: number; maxRecursionDepth: number; maxAllocations: number | null };

/** What only the Monty lane knows, carried beside the shared observation fields. */
export interface MontyFacts {
  /** JSON of the last expression's value (null: None or no value), capped at stdoutBytes. */
  resultJson: string | null;
  resultTruncated: boolean;
  /** The Python exception that ended the program, as Monty reported it (null on success or kill). */
  exception: { kind: MontyErrorKind; typeName: string; message: string } | null;
  /** How the run was isolated: the judge's sandbox requirement for this lane. */
  isolation: {
    /** true when the program ran in a separate, killable worker process and the run reached a known end. */
    isolatedChild: boolean;
    /** The worker's host pid. */
    childPid: number | null;
    interpreter: string;
    nodeFlags: string[];
    /** Every run gets a new Monty instance and new /in and /out folders: nothing of an earlier run is reachable from the program. */
    freshInterpreter: boolean;
    /** Which run of its worker this was (a worker serves at most maxRuns, then is replaced). */
    worker: { runIndex: number; maxRuns: number } | null;
    /** The worker's OS sandbox; null: it had none (see unsandboxedReason), and the judge does not allow the run. */
    sandbox: MontySandboxFacts | null;
    unsandboxedReason?: string;
    montyLimits: MontyLimits & { maxDurationSecs: string; outWriteBytes: number };
  };
  /** Always null since workers are warm (their start-up is no run's); kept for readers of older results. */
  startupCpuMs: number | null;
  /** Why the side effects are empty lists (nothing was traced: there is nothing to trace). */
  sideEffectsBasis: string;
}

export type MontyRunObservation = Observation & { monty: MontyFacts };

const INPUT_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const LIMIT_NAMES: LimitName[] = ['wallMs', 'cpuMs', 'memoryBytes', 'pids', 'outBytes', 'tmpBytes', 'files', 'stdoutBytes', 'stderrBytes'];
const SCRIPT_NAME = 'main.py';
const DEFAULT_RECURSION = 1000;
const MAX_RECURSION = 10_000;
// Values the shared host-facts and exit types do not list yet (reported to the maintainer of types.ts).
const OUT_MECHANISM = 'monty-mount-write-cap' as unknown as HostFacts['outMechanism'];
const EXIT_SOURCE = 'monty-worker' as unknown as RunExit['source'];
const SIDE_EFFECTS_BASIS =
  'Monty has no filesystem (beyond the /in and /out mounts), environment, network, subprocess or signal API, and no ctypes or ' +
  'foreign code: the program cannot ask for a system call, so there is nothing to trace and the lists are empty by construction. ' +
  'The worker process is not traced either: its seccomp allowlist kills it on any call outside what Node and Monty need, and the run then says so.';

let workerFound: string | undefined;
/** The worker script: beside this module (tsc output) or beside/above it in the esbuild bundle. */
export function montyWorkerPath(): string | null {
  if (workerFound) return workerFound; // found once: a file check less per run
  const here = dirname(fileURLToPath(import.meta.url));
  for (const p of [join(here, 'monty-worker.js'), join(here, '..', 'monty-worker.js'), join(here, 'lanes', 'monty-worker.js')]) if (existsSync(p)) return (workerFound = p);
  return null;
}

/**
 * A service keeps a warm pool: `min` workers started now and replaced as they retire (default from
 * AIRLOCK_MONTY_WARM, else 2; 0 turns it off). A one-shot `airlock run` starts one on demand instead.
 */
export function warmMontyLane(min: number = Number(process.env.AIRLOCK_MONTY_WARM ?? 2)): void {
  const worker = montyWorkerPath();
  if (!worker || !Number.isSafeInteger(min) || min <= 0) return;
  configureMontyPools({ min });
  montyPool(worker).warm();
}

function limitEnforcement(memoryBackstop: number | null, sandbox: MontySandboxFacts | null): LimitEnforcement[] {
  const cg = sandbox?.cgroup ?? null;
  const margin = memoryBackstop === null ? 'a per-run allowance' : `${memoryBackstop} bytes`;
  const by: Record<LimitName, string> = {
    wallMs: "host timer from the job's hand-over + SIGKILL of the worker (Monty's own time limit gets the remaining budget)",
    cpuMs: cg?.cpuAccounting ? `host polls the worker's cgroup v${cg.version} CPU accounting every ${POLL_MS} ms + SIGKILL of the worker` : `host polls /proc/<pid>/stat of the worker every ${POLL_MS} ms (10 ms ticks) + SIGKILL of the worker`,
    memoryBytes: cg?.memory
      ? `Monty heap limit (maxMemory) + the worker's cgroup v${cg.version} memory limit, set for the run to its memory at the hand-over plus ${margin} (the kernel OOM-kills the worker past it)`
      : `Monty heap limit (maxMemory) + host polls the worker's RSS every ${POLL_MS} ms and SIGKILLs it past ${margin} of growth in the run`,
    pids: `Monty has no process or thread API${sandbox ? "; the worker's seccomp allowlist refuses fork and any clone but a thread's" : ''}${cg?.pids ? `; its cgroup caps its tasks at ${cg.pids}` : ''}`,
    outBytes: 'Monty /out mount write cap (cumulative bytes written) + the host writes /out itself and stops at the cap',
    tmpBytes: 'Monty mounts only /in and /out: there is no /tmp to write',
    files: 'the host writes /out itself and stops at the file cap; its /out diff stops past it',
    stdoutBytes: 'host capture cap (kept bytes; the rest counted and hashed)',
    stderrBytes: 'host capture cap (kept bytes; the rest counted and hashed)',
  };
  return LIMIT_NAMES.map((limit) => ({ limit, enforcedBy: by[limit] }));
}

function hostFacts(memoryBackstop: number | null, sandbox: MontySandboxFacts | null): HostFacts {
  return {
    bwrapVersion: sandbox ? sandbox.bwrapVersion : 'none (unsandboxed Monty worker)',
    cgroupVersion: sandbox?.cgroup?.version ?? null,
    hostUid: sandbox ? sandbox.hostUid : (process.getuid?.() ?? -1),
    hostIds: sandbox?.hostIds ?? 'caller',
    sandboxUid: sandbox ? sandbox.sandboxUid : (process.getuid?.() ?? -1),
    seccomp: sandbox !== null,
    syscallTracer: null,
    outMechanism: OUT_MECHANISM,
    limits: limitEnforcement(memoryBackstop, sandbox),
  };
}

function nullResources(reason: string): Resources {
  const r: Resources = { cpuUserMs: null, cpuSystemMs: null, peakMemoryBytes: null, diskWriteBytes: null, networkBytesIn: null, networkBytesOut: null, wallMs: null, unmeasured: {}, basis: {} };
  for (const k of ['cpuUserMs', 'cpuSystemMs', 'peakMemoryBytes', 'diskWriteBytes', 'networkBytesIn', 'networkBytesOut', 'wallMs'] as const) r.unmeasured[k] = reason;
  return r;
}

function emptySideEffects(pid: number | null): Observation['sideEffects'] {
  return { bwrapPid: null, programPid: pid, processesSpawned: { count: 0, threads: 0, executables: [], outlivedProgram: 0, refusedForks: 0 }, signalsSent: [], networkAttempts: [], privilegedSyscalls: [], deviceAccess: [], fileAccess: [], unparsedLines: 0 };
}

function errorObservation(runId: string, problems: Problem[], started: Date, status: RunStatus = 'SANDBOX_ERROR'): MontyRunObservation {
  const now = new Date();
  const empty = new StreamCapture(0).result();
  return {
    runId,
    startedAt: started.toISOString(),
    endedAt: now.toISOString(),
    wallMs: now.getTime() - started.getTime(),
    exit: { code: null, signal: null, source: 'none' },
    status,
    reason: problems.map((p) => p.message).join('; '),
    limitsExceeded: [],
    stdout: empty,
    stderr: empty,
    resources: nullResources('the program did not run'),
    sideEffects: null,
    sideEffectsUnavailable: 'the program did not run',
    fs: { out: null, outError: 'the program did not run', scopes: [] },
    inputs: [],
    host: hostFacts(null, null),
    problems: status === 'SANDBOX_ERROR' ? problems : [],
    monty: {
      resultJson: null,
      resultTruncated: false,
      exception: null,
      isolation: {
        isolatedChild: false,
        childPid: null,
        interpreter: `@pydantic/monty in Node ${process.version}`,
        nodeFlags: [],
        freshInterpreter: false,
        worker: null,
        sandbox: null,
        montyLimits: { maxMemory: 0, maxRecursionDepth: 0, maxAllocations: null, maxDurationSecs: 'n/a', outWriteBytes: 0 },
      },
      startupCpuMs: null,
      sideEffectsBasis: SIDE_EFFECTS_BASIS,
    },
  };
}

function checkLimits(action: Action, opts: MontyLaneOptions): Problem[] {
  const p: Problem[] = [];
  const l = action.limits as unknown as Record<string, unknown>;
  for (const k of ['wallMs', 'cpuMs', 'memoryBytes', 'diskBytes', 'files', 'stdoutBytes', 'stderrBytes']) {
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
function classify(end: MontyEndMessage, limits: Action['limits']): { status: RunStatus; limit: LimitName | null; reason: string } {
  if (end.ok) return { status: 'SUCCESS', limit: null, reason: 'the program completed' };
  const what = `${end.typeName}: ${end.message}`.slice(0, 300);
  if (end.kind === 'runtime' && end.typeName === 'TimeoutError' && /^time limit exceeded/.test(end.message)) return { status: 'TIMEOUT', limit: 'wallMs', reason: `wall time ${limits.wallMs} ms exceeded: Monty stopped the program (${what})` };
  if (end.kind === 'runtime' && end.typeName === 'MemoryError' && /^memory limit exceeded/.test(end.message)) return { status: 'RESOURCE_KILLED', limit: 'memoryBytes', reason: `memory limit ${limits.memoryBytes} bytes: Monty stopped the program (${what})` };
  if (end.kind === 'runtime' && end.typeName === 'MemoryError' && /^allocation limit exceeded/.test(end.message)) return { status: 'RESOURCE_KILLED', limit: 'memoryBytes', reason: `allocation limit: Monty stopped the program (${what})` };
  if (end.kind === 'runtime' && end.typeName === 'OSError' && /^disk write limit of \d+ bytes exceeded/.test(end.message)) return { status: 'FAILURE', limit: 'outBytes', reason: `output size limit ${limits.diskBytes} bytes: a write to /out was refused and the program ended with it (${what})` };
  if (end.kind === 'internal') return { status: 'SANDBOX_ERROR', limit: null, reason: `the Monty worker failed: ${what}` };
  if (end.kind === 'unsupported') return { status: 'FAILURE', limit: null, reason: `Monty could not run what the program asked for (${what})` };
  return { status: 'FAILURE', limit: null, reason: `the program raised ${what}` };
}

/** The worker's signal: bwrap exits with 128 + n when the worker was killed by signal n; a plain child reports it. */
function signalOf(exit: { code: number | null; signal: NodeJS.Signals | null }): NodeJS.Signals | null {
  if (exit.signal) return exit.signal;
  if (exit.code === null || exit.code <= 128 || exit.code >= 128 + 65) return null;
  const n = exit.code - 128;
  return (Object.entries(osConstants.signals).find(([, v]) => v === n)?.[0] ?? `SIG${n}`) as NodeJS.Signals;
}

/** Where a Monty run reads and writes, and the caller's cancel. */
export interface MontyLaneContext {
  inputsDir: string;
  outDir: string;
  /** The caller is making outDir's parent: outDir is made after it (nothing runs if it failed). */
  outDirParent?: Promise<unknown>;
  /** Aborted by the caller (e.g. a UTP cancel): the worker is killed, the run ends POLICY_ABORTED. */
  signal?: AbortSignal;
}

/**
 * Runs a `code` Action in the Monty lane. `inputsDir` holds the action's inputs by name, already
 * hash-checked by the caller (they are hashed again as they are handed to the worker); `outDir`
 * receives /out (created; must be empty). Never throws: every failure is a SANDBOX_ERROR observation.
 */
export async function runInMontyLane(action: Action, ctx: MontyLaneContext, opts: MontyLaneOptions = {}): Promise<LaneOutcome> {
  if (action.run.kind !== 'code' || action.run.language !== 'python') {
    return { ok: false, problems: [{ code: 'LANE_ACTION_NOT_RUNNABLE', message: `the monty lane runs Python code; ${action.id} is a ${action.run.kind} action (use the ns lane)` }] };
  }
  const observation = await runMonty(action, action.run.code, ctx, opts);
  return { ok: true, observation, argv: ['monty', SCRIPT_NAME] };
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
  // outDir is made when the worker sends its first /out entry (monty-out.ts): most runs send none.
  const outDirWhy = await Promise.resolve(ctx.outDirParent).then(() => outDirProblem(ctx.outDir), (e: Error) => e.message);
  if (outDirWhy !== null) return errorObservation(runId, [{ code: 'MONTY_OUTDIR', message: `cannot use ${ctx.outDir} as /out: ${outDirWhy}` }], started);
  const limits = action.limits;
  const montyLimits: MontyLimits = { maxMemory: limits.memoryBytes, maxRecursionDepth: opts.maxRecursionDepth ?? DEFAULT_RECURSION, maxAllocations: opts.maxAllocations ?? null };
  const x = await execOnPool(montyPool(worker), {
    job: { code, scriptName: SCRIPT_NAME, outWriteBytes: limits.diskBytes, wallMs: limits.wallMs, limits: montyLimits, resultBytes: limits.stdoutBytes },
    inputs: action.inputs.map((i) => ({ name: i.name, path: join(ctx.inputsDir, i.name), sha256: i.sha256 })),
    outDir: ctx.outDir,
    limits,
    ...(ctx.signal ? { signal: ctx.signal } : {}),
  });
  if (x.refused) return errorObservation(runId, [x.refused], started, x.refused.code === 'MONTY_CANCELED' ? 'POLICY_ABORTED' : 'SANDBOX_ERROR');
  return observe(runId, x, limits, montyLimits);
}

/** How the run ended, from what the host saw (its kills first, then the worker's protocol, its end message, its death). */
function statusOf(x: ExecOutcome, limits: Action['limits']): { status: RunStatus; reason: string; limit: LimitName | null; exitCode: number | null } {
  const sig = x.workerExit ? signalOf(x.workerExit) : null;
  const died = sig ?? `exit ${x.workerExit?.code ?? '?'}`;
  if (x.kill) return { status: x.kill.status, reason: x.kill.reason, limit: x.kill.limit, exitCode: null };
  if (x.protocolError !== null) return { status: 'SANDBOX_ERROR', reason: `the Monty worker broke the protocol: ${x.protocolError}`, limit: null, exitCode: null };
  if (x.end && x.programStarted) {
    const c = classify(x.end, limits);
    return { ...c, exitCode: x.end.ok ? 0 : 1 };
  }
  if (x.oomKilled) return { status: 'RESOURCE_KILLED', reason: `memory limit ${limits.memoryBytes} bytes: the kernel OOM-killed the worker (its cgroup allowed ${x.memoryBackstop} bytes above its memory at the hand-over)`, limit: 'memoryBytes', exitCode: null };
  if (sig === 'SIGSYS') return { status: 'POLICY_ABORTED', reason: 'the Monty worker made a system call its seccomp allowlist forbids and was killed (SIGSYS)', limit: null, exitCode: null };
  if (!x.programStarted) {
    const why = x.end ? (x.end.ok ? 'it ended a run it never started' : `${x.end.typeName}: ${x.end.message}`.slice(0, 300)) : `it ended (${died}): ${(x.worker?.stderr ?? '').slice(-300).trim()}`;
    return { status: 'SANDBOX_ERROR', reason: `the Monty worker failed before the program started: ${why}`, limit: null, exitCode: null };
  }
  // The worker died on its own while the program ran: Monty (or V8) crashed under it.
  return { status: 'FAILURE', reason: `the Monty worker died while the program ran (${died}); see stderr`, limit: null, exitCode: null };
}

async function observe(runId: string, x: ExecOutcome, limits: Action['limits'], montyLimits: MontyLimits): Promise<MontyRunObservation> {
  const limitsExceeded = new Set<LimitName>(x.out.exceeded);
  const { status, reason, limit, exitCode } = statusOf(x, limits);
  if (limit) limitsExceeded.add(limit);
  const sig = x.workerExit ? signalOf(x.workerExit) : null;

  // ---- /out: the host wrote it from what the worker sent; diffed like any run's ----
  let outChanges: FsChange[] | null = null;
  let outError: string | undefined;
  let outBytes: number | null = x.out.bytes;
  if (x.out.hostError) {
    // What the program left could not be kept: the diff cannot be verified (the judge blocks).
    outError = x.out.hostError;
    outBytes = null;
  } else {
    try {
      const budget = new DiffBudget({ files: limits.files, bytes: limits.diskBytes, deadline: x.startedAt.getTime() + limits.wallMs + OBSERVE_MARGIN_MS });
      // outDir was empty (or absent) before the run and only the host writes to it: nothing made, nothing to diff.
      outChanges = !x.out.rootMade ? [] : diffSnapshots({ root: x.outDir, entries: new Map() }, await snapshotTree(x.outDir, budget), { mountPoint: '/out' });
    } catch (e) {
      if (e instanceof DiffBudgetExceeded && e.limit !== 'time') limitsExceeded.add(e.limit);
      outError = e instanceof DiffBudgetExceeded ? `the /out diff stopped: ${e.message}` : `the /out diff failed: ${(e as Error).message}`;
      outBytes = null;
    }
  }
  if (x.out.exceeded.size > 0) outError = [outError, `the program's /out went past the run's ${[...x.out.exceeded].join(' and ')} limit: the host wrote nothing past it`].filter(Boolean).join('; ');
  if (x.end && x.end.outSkipped > 0) outError = [outError, `${x.end.outSkipped} /out entries were neither folders nor regular files and were not taken`].filter(Boolean).join('; ');

  const sandbox = x.worker?.sandbox ?? null;
  const noNetwork = sandbox ? 'Monty has no network API, and the worker has an empty network namespace and no socket call: 0 by construction' : 'Monty has no network API: 0 by construction';
  const resources: Resources = {
    cpuUserMs: x.cpu?.userMs ?? null,
    cpuSystemMs: x.cpu?.systemMs ?? null,
    peakMemoryBytes: x.peakMemoryBytes,
    diskWriteBytes: outBytes,
    networkBytesIn: 0,
    networkBytesOut: 0,
    wallMs: x.wallMs,
    unmeasured: {},
    basis: {
      cpuUserMs: x.cpu?.basis ?? 'not measured',
      cpuSystemMs: 'as cpuUserMs',
      peakMemoryBytes: x.peakBasis,
      diskWriteBytes: 'bytes of regular files the host wrote to /out from what the worker sent (Monty also caps the cumulative bytes written through /out)',
      networkBytesIn: noNetwork,
      networkBytesOut: noNetwork,
      wallMs: "host clock from the job's hand-over to the worker's end message (or its death)",
    },
  };
  for (const f of ['cpuUserMs', 'cpuSystemMs', 'peakMemoryBytes'] as const) if (resources[f] === null) resources.unmeasured[f] = 'the worker was not readable (gone, or a host without /proc or cgroups)';
  if (outBytes === null) resources.unmeasured.diskWriteBytes = outError ?? 'the /out diff failed';
  if (resources.cpuUserMs !== null && resources.cpuSystemMs !== null && resources.cpuUserMs + resources.cpuSystemMs > limits.cpuMs) limitsExceeded.add('cpuMs');

  const e = x.end;
  const pid = x.worker?.pid ?? null;
  return {
    runId,
    startedAt: x.startedAt.toISOString(),
    endedAt: x.endedAt.toISOString(),
    wallMs: x.wallMs,
    exit: exitCode !== null ? { code: exitCode, signal: null, source: EXIT_SOURCE } : { code: x.workerExit && !sig ? x.workerExit.code : null, signal: sig, source: 'none' },
    status,
    reason,
    limitsExceeded: LIMIT_NAMES.filter((l) => limitsExceeded.has(l)),
    stdout: x.stdout,
    stderr: x.stderr,
    resources,
    sideEffects: x.programStarted ? emptySideEffects(pid) : null,
    ...(x.programStarted ? {} : { sideEffectsUnavailable: 'the program did not start' }),
    fs: { out: outChanges, ...(outError ? { outError } : {}), scopes: [] },
    inputs: x.inputs,
    host: hostFacts(x.memoryBackstop, sandbox),
    problems: status === 'SANDBOX_ERROR' ? [{ code: 'MONTY_CHILD_FAILED', message: reason }] : [],
    monty: {
      resultJson: e?.ok ? e.resultJson : null,
      resultTruncated: e?.ok ? e.resultTruncated : false,
      exception: e && !e.ok ? { kind: e.kind, typeName: e.typeName, message: e.message } : null,
      isolation: {
        isolatedChild: x.programStarted && status !== 'SANDBOX_ERROR',
        childPid: pid,
        interpreter: `@pydantic/monty in Node ${process.version} (warm worker process)`,
        nodeFlags: x.worker?.nodeFlags ?? [],
        freshInterpreter: true,
        worker: x.worker ? { runIndex: x.worker.runIndex, maxRuns: x.worker.maxRuns } : null,
        sandbox,
        ...(x.worker?.unsandboxedReason ? { unsandboxedReason: x.worker.unsandboxedReason } : {}),
        montyLimits: { ...montyLimits, maxDurationSecs: 'what is left of wallMs when the worker gets the job', outWriteBytes: limits.diskBytes },
      },
      startupCpuMs: null,
      sideEffectsBasis: SIDE_EFFECTS_BASIS,
    },
  };
}
