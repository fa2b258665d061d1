// The Monty lane's pool of warm workers (one process-wide pool per worker script): `min` workers are
// started ahead of need, a run takes a free one (or waits for one, up to `max` running), and a worker
// is replaced in the background once it is retired: after a crash, a kill by the host (a limit, a
// timeout, a cancel), a protocol error, too much memory kept, or `maxRunsPerWorker` runs. Each worker
// is its own sandboxed process (monty-sandbox.ts). Idle workers do not keep the process alive (their
// handles are unref'd), and close() ends them all.
import { availableParallelism } from 'node:os';
import { HeldFiles } from '../../base/held-files.js';
import type { Problem } from '../../base/problem.js';
import { FROM_WORKER, FrameReader, type Frame } from './monty-protocol.js';
import { startWorkerProcess, type WorkerProcess, type WorkerSpec } from './monty-sandbox.js';

export interface MontyPoolOptions {
  /** Workers kept warm (started ahead of need, replaced in the background). */
  min: number;
  /** Workers at most, busy or not: runs beyond wait for a free one. */
  max: number;
  /** A worker serves at most this many runs (each in a fresh Monty instance), then is replaced. */
  maxRunsPerWorker: number;
  /** How long a worker may take to start before it is killed. */
  startTimeoutMs: number;
}

export const DEFAULT_POOL: MontyPoolOptions = {
  min: 0,
  max: Math.max(2, availableParallelism()),
  maxRunsPerWorker: 500,
  startTimeoutMs: 10_000,
};

/** What a run learns about the worker it got. */
export interface WorkerFacts {
  pid: number | null;
  /** 1 for the worker's first run. */
  runIndex: number;
  maxRuns: number;
}

type State = 'starting' | 'idle' | 'busy' | 'dead';
/** The worker's stream broke (`protocol`: it sent what no worker may) or the worker ended. */
export interface Broken {
  protocol: boolean;
  why: string;
}

/** One worker process and its frame stream. */
export class MontyWorker {
  state: State = 'starting';
  /** What the worker was doing when it died (a run holding it handles its death itself). */
  stateAtExit: State | null = null;
  runs = 0;
  readonly ready: Promise<Problem | null>;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; error: string | null }>;
  private handler: ((f: Frame) => void) | null = null;
  private broken: ((b: Broken) => void) | null = null;
  private readonly reader = new FrameReader();
  private stderrTail = '';
  /** Memory charged to the worker before its first run (a worker that keeps much more is replaced). */
  baselineMemory: number | null | undefined = undefined;
  /** Its /proc/<pid> files, opened at its first run and closed when it ends (base/held-files.ts). */
  readonly procFiles = new HeldFiles();

  constructor(readonly proc: WorkerProcess, startTimeoutMs: number) {
    let onReady!: (p: Problem | null) => void;
    this.ready = new Promise((r) => (onReady = r));
    this.exited = proc.exited.then((e) => {
      this.stateAtExit = this.state;
      this.state = 'dead';
      this.procFiles.close();
      onReady({ code: 'MONTY_CHILD_FAILED', message: `the Monty worker ended before it was ready (${e.error ?? e.signal ?? `exit ${e.code}`}): ${this.stderr().slice(0, 300).trim()}` });
      this.broken?.({ protocol: false, why: `the worker ended (${e.signal ?? `exit ${e.code}`})` });
      return e;
    });
    const timer = setTimeout(() => {
      onReady({ code: 'MONTY_CHILD_FAILED', message: `the Monty worker was not ready within ${startTimeoutMs} ms` });
      this.kill();
    }, startTimeoutMs);
    timer.unref();
    proc.stderr.on('data', (d: Buffer) => void (this.stderrTail = (this.stderrTail + d.toString('utf8')).slice(-4096)));
    proc.stderr.on('error', () => undefined);
    proc.stdin.on('error', () => undefined);
    proc.stdout.on('error', () => undefined);
    proc.stdout.on('data', (chunk: Buffer) => {
      const r = this.reader.push(chunk);
      for (const f of r.frames) {
        if (this.state === 'starting' && f.type === FROM_WORKER.ready) {
          clearTimeout(timer);
          this.state = 'idle';
          onReady(null);
        } else if (this.handler) this.handler(f);
        else return this.fail(`an unexpected frame ${JSON.stringify(f.type)} while no run was active`);
      }
      if (r.error) this.fail(r.error);
    });
  }

  /** The worker's own stderr (Node's messages, a crash), last 4 KiB. */
  stderr(): string {
    return this.stderrTail;
  }

  /** Receive the worker's frames (one run at a time); `onBroken` when the stream or the worker breaks. */
  attach(onFrame: (f: Frame) => void, onBroken: (b: Broken) => void): void {
    this.handler = onFrame;
    this.broken = onBroken;
  }

  detach(): void {
    this.handler = null;
    this.broken = null;
  }

  private fail(why: string): void {
    const b = this.broken;
    this.kill();
    b?.({ protocol: true, why });
  }

  kill(): void {
    if (this.state !== 'dead') this.proc.kill();
  }
}

interface Waiter {
  resolve: (r: { ok: true; worker: MontyWorker; facts: WorkerFacts } | { ok: false; problem: Problem }) => void;
}

export class MontyPool {
  private readonly workers = new Set<MontyWorker>();
  private readonly waiters: Waiter[] = [];
  private starting = 0;
  private closed = false;
  /** A failed start: no background replacement before this time (a broken host must not spin). */
  private backoffUntil = 0;

  constructor(
    private readonly spec: WorkerSpec,
    public options: MontyPoolOptions = DEFAULT_POOL,
  ) {}

  /** Start workers until `min` are alive (in the background). */
  warm(): void {
    if (this.closed || Date.now() < this.backoffUntil) return;
    while (this.workers.size + this.starting < this.options.min) this.startOne();
  }

  /** A free worker for one run (started on demand), or why there is none. Never throws. */
  acquire(signal?: AbortSignal): Promise<{ ok: true; worker: MontyWorker; facts: WorkerFacts } | { ok: false; problem: Problem }> {
    if (this.closed) return Promise.resolve({ ok: false, problem: { code: 'MONTY_CHILD_FAILED', message: 'the Monty worker pool is closed' } });
    return new Promise((resolve) => {
      const w: Waiter = { resolve };
      if (signal) {
        const onAbort = (): void => {
          const i = this.waiters.indexOf(w);
          if (i >= 0) this.waiters.splice(i, 1);
          resolve({ ok: false, problem: { code: 'MONTY_CANCELED', message: 'canceled by the caller before a worker was free' } });
        };
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
        w.resolve = (r) => {
          signal.removeEventListener('abort', onAbort);
          resolve(r);
        };
      }
      this.waiters.push(w);
      this.dispatch();
    });
  }

  /** Give a worker back after a run; `retire` ends it (it is replaced in the background when below `min`). */
  release(worker: MontyWorker, retire: boolean): void {
    worker.detach();
    if (worker.state === 'dead' || retire || this.closed || worker.runs >= this.options.maxRunsPerWorker) {
      this.retire(worker);
    } else {
      worker.state = 'idle';
      worker.proc.ref(false);
    }
    this.dispatch();
    this.warm();
  }

  /** Every worker: its host pid, state and runs served (tests, `airlock doctor`). */
  stats(): { pid: number | null; state: State; runs: number }[] {
    return [...this.workers].map((w) => ({ pid: w.proc.nodePid(), state: w.state, runs: w.runs }));
  }

  /** Ends every worker and waits until they are gone and cleaned up. */
  async close(): Promise<void> {
    this.closed = true;
    for (const w of this.waiters.splice(0)) w.resolve({ ok: false, problem: { code: 'MONTY_CHILD_FAILED', message: 'the Monty worker pool was closed' } });
    const all = [...this.workers];
    for (const w of all) {
      this.retire(w);
      w.proc.ref(true); // the caller waits for their end: keep the process up until then
    }
    await Promise.all(all.map((w) => w.exited.then(() => w.proc.dispose())));
    // Workers still starting are retired as they come up (startOne sees `closed`).
    while (this.starting > 0) await new Promise((r) => setTimeout(r, 10));
  }

  private retire(worker: MontyWorker): void {
    if (!this.workers.delete(worker)) return;
    worker.detach();
    worker.state = 'dead';
    // Idle, or its run is over: nothing of it is waited for, so it is killed (its stdin's end would do it too, later).
    worker.proc.stdin.end();
    worker.proc.kill();
    worker.proc.ref(false);
    void worker.exited.then(() => worker.proc.dispose());
  }

  private dispatch(): void {
    while (this.waiters.length > 0) {
      const idle = [...this.workers].find((w) => w.state === 'idle');
      if (!idle) break;
      const waiter = this.waiters.shift()!;
      idle.state = 'busy';
      idle.runs++;
      idle.proc.ref(true);
      waiter.resolve({ ok: true, worker: idle, facts: { pid: idle.proc.nodePid(), runIndex: idle.runs, maxRuns: this.options.maxRunsPerWorker } });
    }
    // Start what the waiting runs need (started workers count as on their way). A run waits for them:
    // they keep the process up, as a busy worker does (one started ahead of need was not).
    const started = [...this.workers].filter((w) => w.state === 'starting');
    if (this.waiters.length > 0) for (const w of started) w.proc.ref(true);
    const onTheirWay = this.starting + started.length;
    let need = this.waiters.length - onTheirWay;
    while (need-- > 0 && this.workers.size + this.starting < this.options.max) this.startOne(true);
  }

  private startOne(demanded = false): void {
    this.starting++;
    void startWorkerProcess(this.spec).then(async (r) => {
      if (!r.ok) {
        this.starting--;
        return this.startFailed(r.problem, demanded);
      }
      const w = new MontyWorker(r.worker, this.options.startTimeoutMs);
      r.worker.ref(this.waiters.length > 0);
      this.workers.add(w);
      // A worker that dies while idle (killed from outside) leaves the pool at once, and is replaced.
      void w.exited.then(() => {
        if (w.stateAtExit !== 'idle' || !this.workers.has(w)) return; // a run, or the start below, handles it
        this.retire(w);
        this.warm();
      });
      this.starting--;
      const problem = await w.ready;
      if (problem) {
        this.retire(w);
        return this.startFailed(problem, demanded);
      }
      if (this.closed) return this.retire(w);
      r.worker.ref(false);
      this.dispatch();
    });
  }

  private startFailed(problem: Problem, demanded: boolean): void {
    this.backoffUntil = Date.now() + 1000;
    // A run waiting for this start gets the reason (when nothing else could serve it soon).
    if (demanded || this.workers.size === 0) this.waiters.shift()?.resolve({ ok: false, problem });
    this.dispatch();
  }
}

/** The worker process's own caps (a run's Monty heap, time and CPU limits are set per run). */
export const DEFAULT_WORKER: Omit<WorkerSpec, 'workerPath'> = {
  heapMiB: 256,
  stagingBytes: 1 << 30,
  idleMemoryBytes: 256 << 20,
  pids: 64,
};

const pools = new Map<string, MontyPool>();
let configured: MontyPoolOptions = DEFAULT_POOL;

/** The process-wide pool for a worker script (created on first use, with min 0 unless configured). */
export function montyPool(workerPath: string): MontyPool {
  let p = pools.get(workerPath);
  if (!p) {
    p = new MontyPool({ workerPath, ...DEFAULT_WORKER }, configured);
    pools.set(workerPath, p);
  }
  return p;
}

/** Sets the pools' options (a service keeps `min` warm workers; a one-shot run starts one on demand). */
export function configureMontyPools(opts: Partial<MontyPoolOptions>): MontyPoolOptions {
  configured = { ...configured, ...opts };
  if (configured.max < Math.max(1, configured.min)) configured.max = Math.max(1, configured.min);
  for (const p of pools.values()) p.options = configured;
  return configured;
}

/** Ends every worker of every pool and waits for them (a service's shutdown; tests). */
export async function closeMontyPools(): Promise<void> {
  const all = [...pools.values()];
  pools.clear();
  await Promise.all(all.map((p) => p.close()));
}
