// One run on a warm worker: hand it the job and the inputs (hashed as they are sent), watch the
// run's limits, take its frames (prints, traceback, /out, end), and measure what the host measures:
// wall time by its own timer; CPU from the worker's cgroup (or /proc) before and after; peak memory
// from the worker's VmHWM, reset before the run; /out as the host wrote it. Any limit breach, timeout,
// cancel, protocol error or death ends the worker (killed, replaced by the pool); a clean run gives it
// back for the next run, which gets a new Monty instance and new folders.
import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { once } from 'node:events';
import type { HeldFiles } from '../../base/held-files.js';
import type { Problem } from '../../base/problem.js';
import type { Action } from '../../action/action.js';
import { StreamCapture } from '../ns/capture.js';
import type { CapturedStream, LimitName, RunStatus } from '../types.js';
import { encodeFrame, FROM_WORKER, MAX_PAYLOAD, parseEndMessage, TO_WORKER, type Frame, type MontyEndMessage, type MontyJob } from './monty-protocol.js';
import { OutReceiver } from './monty-out.js';
import type { Broken, MontyPool, MontyWorker, WorkerFacts } from './monty-pool.js';
import type { MontySandboxFacts } from './monty-sandbox.js';

/** How often the host polls the worker's CPU (and, without a memory cgroup, its RSS). */
export const POLL_MS = 10;
/** Linux reports /proc times in USER_HZ ticks, 100 per second on every architecture Node supports. */
const TICK_MS = 10;
/** A worker that keeps this much more memory than before its first run is replaced. */
const KEPT_MEMORY_RETIRE = 64 << 20;

export interface Kill {
  status: RunStatus;
  /** null: not a limit (a caller's cancel, a forbidden syscall). */
  limit: LimitName | null;
  reason: string;
}

export interface ExecSpec {
  job: Omit<MontyJob, 'inputs'>;
  inputs: { name: string; path: string; sha256: string }[];
  outDir: string;
  limits: Action['limits'];
  signal?: AbortSignal;
}

interface ProcSample {
  cpuUserMs: number;
  cpuSystemMs: number;
  rssBytes: number;
  hwmBytes: number;
}

export interface ExecOutcome {
  /** Nothing ran: no worker, an input that did not check out, a cancel while waiting. */
  refused: Problem | null;
  worker: (WorkerFacts & { stderr: string; sandbox: MontySandboxFacts | null; unsandboxedReason: string | null; nodeFlags: string[] }) | null;
  startedAt: Date;
  endedAt: Date;
  wallMs: number;
  programStarted: boolean;
  end: MontyEndMessage | null;
  kill: Kill | null;
  protocolError: string | null;
  /** The worker's end when it died during the run (null: it finished the run alive). */
  workerExit: { code: number | null; signal: NodeJS.Signals | null } | null;
  /** The kernel OOM-killed in the worker's cgroup. */
  oomKilled: boolean;
  stdout: CapturedStream;
  stderr: CapturedStream;
  inputs: { name: string; sha256: string; bytes: number }[];
  cpu: { userMs: number; systemMs: number; basis: string } | null;
  peakMemoryBytes: number | null;
  peakBasis: string;
  out: OutReceiver;
  outDir: string;
  /** The kernel memory limit set for this run (cgroup), or the RSS growth that kills it (no cgroup). */
  memoryBackstop: number;
}

/**
 * CPU and memory of a live worker from /proc, through the files the worker holds open (bound to its
 * process: null once it is gone, or on a host without /proc).
 */
function sampleProc(files: HeldFiles, pid: number): ProcSample | null {
  const stat = files.read(`/proc/${pid}/stat`);
  const status = files.read(`/proc/${pid}/status`);
  if (stat === null || status === null) return null;
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const kb = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
  const s = { cpuUserMs: Number(rest[11]) * TICK_MS, cpuSystemMs: Number(rest[12]) * TICK_MS, rssBytes: kb('VmRSS'), hwmBytes: kb('VmHWM') };
  return Object.values(s).every(Number.isFinite) ? s : null;
}

/** The memory a run may add to its worker: Monty's heap limit plus a margin (V8, Node), and the run's files on the worker's tmpfs. */
export function memoryAllowance(limits: Action['limits'], inputBytes: number): { backstop: number; total: number } {
  const backstop = limits.memoryBytes + Math.max(Math.floor(limits.memoryBytes / 2), 32 << 20);
  return { backstop, total: backstop + inputBytes + limits.diskBytes };
}

function cpuOf(worker: MontyWorker, pid: number | null): { user: number; system: number } | null {
  const split = worker.proc.cgroup?.enforces.cpuAccounting ? worker.proc.cgroup.cpuSplitMs() : null;
  if (split) return split;
  const s = pid !== null ? sampleProc(worker.procFiles, pid) : null;
  return s ? { user: s.cpuUserMs, system: s.cpuSystemMs } : null;
}

function memoryNow(worker: MontyWorker, pid: number | null): number | null {
  return worker.proc.cgroup?.memoryBytes() ?? (pid !== null ? (sampleProc(worker.procFiles, pid)?.rssBytes ?? null) : null);
}

/** The peak RSS of the live worker (VmHWM), or null once it is gone. */
function peakRss(worker: MontyWorker, pid: number): number | null {
  const kb = /^VmHWM:\s+(\d+) kB/m.exec(worker.procFiles.read(`/proc/${pid}/status`) ?? '')?.[1];
  return kb === undefined ? null : Number(kb) * 1024;
}

/** The kernel limit is rounded up to this step, so that runs with the same limits rarely rewrite it. */
const LIMIT_STEP = 4 << 20;

/**
 * Runs one job on a worker of `pool`. Never throws. A worker that was gone before it took the job
 * (it died idle, e.g. killed from outside, just as it was handed out) said nothing at all: the job
 * goes once more to another worker.
 */
export async function execOnPool(pool: MontyPool, spec: ExecSpec): Promise<ExecOutcome> {
  const first = await execOnce(pool, spec);
  return first.silentDeath ? execOnce(pool, spec) : first;
}

async function execOnce(pool: MontyPool, spec: ExecSpec): Promise<ExecOutcome & { silentDeath?: boolean }> {
  const limits = spec.limits;
  const out = new StreamCapture(limits.stdoutBytes);
  const err = new StreamCapture(limits.stderrBytes);
  const receiver = new OutReceiver(spec.outDir, { files: limits.files, bytes: limits.diskBytes });
  let startedAt = new Date();
  const base = (refused: Problem | null, worker: ExecOutcome['worker'] = null): ExecOutcome => ({
    refused, worker, startedAt, endedAt: new Date(), wallMs: Date.now() - startedAt.getTime(), programStarted: false, end: null, kill: null, protocolError: null, workerExit: null,
    oomKilled: false, stdout: out.result(), stderr: err.result(), inputs: [], cpu: null, peakMemoryBytes: null, peakBasis: 'the program did not run', out: receiver, outDir: spec.outDir, memoryBackstop: 0,
  });

  const got = await pool.acquire(spec.signal);
  if (!got.ok) return base(got.problem);
  const worker = got.worker;
  const pid = got.facts.pid;
  const facts = (): ExecOutcome['worker'] => ({ ...got.facts, stderr: worker.stderr(), sandbox: worker.proc.sandbox, unsandboxedReason: worker.proc.unsandboxedReason, nodeFlags: worker.proc.nodeFlags });
  const inputBytes = spec.inputs.reduce((n, i) => n + safeSize(i.path), 0);
  const allowance = memoryAllowance(limits, inputBytes);
  const cg = worker.proc.cgroup;

  // ---- before the job: this run's kernel memory limit, peak RSS reset, CPU base ----
  const memBefore = memoryNow(worker, pid);
  worker.baselineMemory ??= memBefore;
  // A worker that kept much more memory than before its first run serves this run, then is replaced.
  const keptTooMuch = memBefore !== null && worker.baselineMemory !== null && memBefore - worker.baselineMemory > KEPT_MEMORY_RETIRE;
  let memoryBackstop = allowance.backstop;
  if (cg?.enforces.memory && memBefore !== null) {
    try {
      const limit = Math.ceil((memBefore + allowance.total) / LIMIT_STEP) * LIMIT_STEP;
      cg.setMemoryLimit(limit);
      memoryBackstop = limit - memBefore;
    } catch (e) {
      pool.release(worker, true);
      return base({ code: 'MONTY_CHILD_FAILED', message: `cannot set the worker's memory limit for this run: ${(e as Error).message}` }, facts());
    }
  }
  let hwmReset = false;
  // Refused: the peak is then the worker's since its start, as peakBasis says.
  if (pid !== null) hwmReset = worker.procFiles.write(`/proc/${pid}/clear_refs`, '5');
  // Its status file opened now, while it is alive and ours: read after a death, it cannot reach a
  // process that took the pid since (base/held-files.ts).
  if (pid !== null && got.facts.runIndex === 1) worker.procFiles.read(`/proc/${pid}/status`);
  const cpu0 = cpuOf(worker, pid);
  const startRss = cg?.enforces.memory ? null : pid !== null ? (sampleProc(worker.procFiles, pid)?.rssBytes ?? null) : null;

  // ---- the run ----
  startedAt = new Date();
  const t0 = performance.now();
  let kill: Kill | null = null;
  let programStarted = false;
  let end: MontyEndMessage | null = null;
  let protocolError: string | null = null;
  let settle!: () => void;
  const done = new Promise<void>((r) => (settle = r));
  const killWorker = (k: Kill): void => {
    if (kill || end) return;
    kill = k;
    worker.kill();
  };
  const broken = (b: Broken): void => {
    if (b.protocol && !end && !kill) protocolError ??= b.why;
    settle();
  };
  let frames = 0;
  const onFrame = (f: Frame): void => {
    frames++;
    if (end || protocolError || kill) return;
    try {
      switch (f.type) {
        case FROM_WORKER.start:
          if (programStarted) throw new Error('a second start');
          programStarted = true;
          return;
        case FROM_WORKER.stdout:
          return out.push(f.payload);
        case FROM_WORKER.stderr:
          return err.push(f.payload);
        case FROM_WORKER.outDir:
          return receiver.dir(f.payload.toString('utf8'));
        case FROM_WORKER.outFile:
          return receiver.file(f.payload.toString('utf8'));
        case FROM_WORKER.outChunk:
          return receiver.chunk(f.payload);
        case FROM_WORKER.end: {
          end = parseEndMessage(f.payload, limits.stdoutBytes);
          if (!end) throw new Error('a malformed end message');
          return settle();
        }
        default:
          throw new Error(`an unknown frame ${JSON.stringify(f.type)}`);
      }
    } catch (e) {
      protocolError = `the worker sent ${(e as Error).message}`;
      worker.kill();
      settle();
    } finally {
      if (receiver.error && !protocolError) {
        protocolError = receiver.error;
        worker.kill();
        settle();
      }
    }
  };
  worker.attach(onFrame, broken);
  if (worker.state === 'dead') broken({ protocol: false, why: 'the worker ended' });

  const wall = setTimeout(() => killWorker({ status: 'TIMEOUT', limit: 'wallMs', reason: `wall time ${limits.wallMs} ms exceeded: killed by the host` }), limits.wallMs);
  const onCancel = (): void => killWorker({ status: 'POLICY_ABORTED', limit: null, reason: 'canceled by the caller: killed by the host' });
  if (spec.signal?.aborted) onCancel();
  else spec.signal?.addEventListener('abort', onCancel, { once: true });
  const poll = setInterval(() => {
    if (end || kill) return;
    const c = cg?.enforces.cpuAccounting ? cg.cpuTotalMs() : null;
    const s = c === null && pid !== null ? sampleProc(worker.procFiles, pid) : null;
    const used = c !== null && cpu0 ? c - cpu0.user - cpu0.system : s && cpu0 ? s.cpuUserMs + s.cpuSystemMs - cpu0.user - cpu0.system : null;
    if (used !== null && used > limits.cpuMs) return killWorker({ status: 'RESOURCE_KILLED', limit: 'cpuMs', reason: `CPU time limit ${limits.cpuMs} ms exceeded (${Math.round(used)} ms): killed by the host` });
    if (startRss !== null) {
      const rss = s?.rssBytes ?? (pid !== null ? sampleProc(worker.procFiles, pid)?.rssBytes : undefined);
      if (rss !== undefined && rss - startRss > memoryBackstop) killWorker({ status: 'RESOURCE_KILLED', limit: 'memoryBytes', reason: `memory limit ${limits.memoryBytes} bytes: the worker's RSS grew by ${rss - startRss} bytes (backstop ${memoryBackstop}); killed by the host` });
    }
  }, POLL_MS);

  // ---- the job and its inputs, hashed as they are handed over ----
  const job: MontyJob = { ...spec.job, inputs: spec.inputs.map((i) => ({ name: i.name, bytes: safeSize(i.path) })) };
  const inputs: ExecOutcome['inputs'] = [];
  let refused: Problem | null = null;
  const send = async (frame: Buffer): Promise<void> => {
    if (!worker.proc.stdin.write(frame) && !end && !kill && !protocolError) await Promise.race([once(worker.proc.stdin, 'drain'), done]);
  };
  const jobFrame = encodeFrame(TO_WORKER.job, JSON.stringify(job));
  // Without inputs, the job and the go travel in one write (one wake-up of the worker).
  if (spec.inputs.length === 0) {
    await send(Buffer.concat([jobFrame, encodeFrame(TO_WORKER.go)]));
  } else await send(jobFrame);
  for (const i of spec.inputs) {
    if (kill || protocolError || worker.state === 'dead') break;
    await send(encodeFrame(TO_WORKER.input, i.name));
    const got = await sendInput(i.path, send);
    if ('error' in got) {
      refused = { code: 'MONTY_INPUT_UNREADABLE', message: `input ${i.name} cannot be read: ${got.error}`, path: `inputs.${i.name}` };
      break;
    }
    if (got.sha256 !== i.sha256) {
      refused = { code: 'MONTY_INPUT_CHANGED', message: `input ${i.name} has sha256 ${got.sha256} now, the action declares ${i.sha256}`, path: `inputs.${i.name}` };
      break;
    }
    inputs.push({ name: i.name, sha256: got.sha256, bytes: got.bytes });
  }
  if (refused) {
    // Nothing ran: the worker drops the job and stays (its state is the job's folders, which it removes).
    await send(encodeFrame(TO_WORKER.abort));
    clearTimeout(wall);
    clearInterval(poll);
    spec.signal?.removeEventListener('abort', onCancel);
    pool.release(worker, Boolean(kill || protocolError || worker.state === 'dead'));
    return { ...base(refused, facts()), inputs };
  }
  if (spec.inputs.length > 0 && !kill && !protocolError) await send(encodeFrame(TO_WORKER.go));
  await done;

  const wallMs = performance.now() - t0;
  clearTimeout(wall);
  clearInterval(poll);
  spec.signal?.removeEventListener('abort', onCancel);
  receiver.close();
  const finished = end !== null && !kill && !protocolError;
  // ---- after: CPU and peak memory while the worker idles (or what was last seen of a dead one) ----
  const cpu1 = finished ? cpuOf(worker, pid) : cg?.enforces.cpuAccounting ? cpuOf(worker, null) : null;
  const peak = pid !== null ? peakRss(worker, pid) : null;
  let workerExit: ExecOutcome['workerExit'] = null;
  let oomKilled = false;
  if (!finished) {
    // The worker is killed (or died): wait for it, then read how it ended.
    worker.kill();
    const e = await worker.exited;
    workerExit = { code: e.code, signal: e.signal };
    oomKilled = cg?.limitHit().memory ?? false;
  }
  const workerFacts = facts();
  pool.release(worker, !finished || keptTooMuch);

  const cpuBasis = cg?.enforces.cpuAccounting
    ? `the worker's cgroup v${cg.version} CPU accounting, read by the host before the job and after its end${finished ? '' : ' (the worker was killed: as last read)'}`
    : `read by the host from /proc/<pid>/stat of the worker (10 ms ticks) before the job and after its end`;
  return {
    silentDeath: workerExit !== null && frames === 0 && !kill && !protocolError,
    refused: null,
    worker: workerFacts,
    startedAt,
    endedAt: new Date(),
    wallMs,
    programStarted,
    end,
    kill,
    protocolError,
    workerExit,
    oomKilled,
    stdout: out.result(),
    stderr: err.result(),
    inputs,
    cpu: cpu0 && cpu1 ? { userMs: Math.max(0, cpu1.user - cpu0.user), systemMs: Math.max(0, cpu1.system - cpu0.system), basis: cpuBasis } : null,
    peakMemoryBytes: peak,
    peakBasis: peak !== null
      ? `the worker's peak RSS (VmHWM from /proc/<pid>/status)${hwmReset ? ' since this run began (reset through /proc/<pid>/clear_refs before the job)' : ' since the worker started (the reset was refused)'}, Node itself included`
      : 'the worker was gone before its peak could be read',
    out: receiver,
    outDir: spec.outDir,
    memoryBackstop,
  };
}

function safeSize(path: string): number {
  try {
    return fstatSizeNoFollow(path);
  } catch {
    return 0;
  }
}

function fstatSizeNoFollow(path: string): number {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    return fstatSync(fd).size;
  } finally {
    closeSync(fd);
  }
}

/** Reads one input (a regular file, never through a link), hashing every byte as it goes to the worker. */
async function sendInput(path: string, send: (f: Buffer) => Promise<void>): Promise<{ sha256: string; bytes: number } | { error: string }> {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    return { error: (e as NodeJS.ErrnoException).code ?? (e as Error).message };
  }
  try {
    if (!fstatSync(fd).isFile()) return { error: 'not a regular file' };
    const h = createHash('sha256');
    let bytes = 0;
    for (;;) {
      const buf = Buffer.allocUnsafe(MAX_PAYLOAD);
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      h.update(buf.subarray(0, n));
      bytes += n;
      await send(encodeFrame(TO_WORKER.chunk, buf.subarray(0, n)));
    }
    return { sha256: h.digest('hex'), bytes };
  } catch (e) {
    return { error: (e as NodeJS.ErrnoException).code ?? (e as Error).message };
  } finally {
    closeSync(fd);
  }
}
