// The host's syscall tracer (native/tracer.c, built by `npm run build` when a C compiler is present):
// one long-lived process that starts each ns run's bwrap (so this large node process is not forked
// per run), attaches to the sandbox's init while bwrap holds it on --block-fd, and reports the
// program's observed syscalls as lines on its stdout. The program cannot reach this process or its
// pipe from its namespaces: nothing it does can forge or erase a line (run by an ordinary user, the
// tracer is that user, as node is: a program that escaped the namespaces could reach both). Root's
// tracer starts each sandbox as its host user; an ordinary user's, as that user. Without the binary
// (no compiler) or where the host refuses the attach, the runner falls back to strace (slower; it
// cannot resolve links or refuse a call off the list).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { nativeBinaryPath } from '../../base/native.js';

export const tracerBinaryPath = (): string | null => nativeBinaryPath('airlock-tracer');

/** One run's trace: event lines (without the run id), complete once `done` resolves. */
export interface TraceRun {
  readonly lines: string[];
  /** Resolves when every traced task of the run is gone, or the tracer was lost (`lost` says why). */
  readonly done: Promise<void>;
  lost: string | null;
}

/** What bwrap is started with (see native/tracer.c, "launches"). */
export interface LaunchSpec {
  /** bwrap and its arguments; fds 3 (--info-fd), 4 (--block-fd) and 5 (--seccomp) are wired by the tracer. */
  argv: string[];
  /** FIFOs the tracer creates (in a root-owned directory) for the sandbox's stdout and stderr. */
  stdoutFifo: string;
  stderrFifo: string;
  /** The seccomp filter bwrap reads on fd 5 (a root-owned file). */
  seccompFile: string;
  /** cgroup.procs files bwrap joins before it starts (everything of the run is born inside). */
  cgroupProcs: string[];
  /**
   * RLIMIT_CPU soft/hard (seconds), RLIMIT_FSIZE (bytes, or null), RLIMIT_CORE 0; the backstops where no
   * cgroup counts memory or processes: RLIMIT_AS on bwrap, RLIMIT_NPROC on its init (inside its user
   * namespace); the ids bwrap runs as (an ordinary user's tracer: that user's own, and no group).
   */
  limits: { cpuSoftS: number; cpuHardS: number; fsizeBytes: number | null; asBytes: number | null; nproc: number | null; uid: number; gid: number; group?: number | null };
  /** Hold bwrap's init (blocked) after it is traced until release(): the network bridge starts first. */
  hold: boolean;
  /**
   * Start bwrap from this launcher, held ahead of need and already in the run's cgroups; `cgroupProcs`
   * name them, for the launcher the tracer forks instead if this one is gone (killed meanwhile).
   */
  held?: HeldLauncher;
}

/** A launcher forked ahead of need that moves itself into a run's cgroups and waits for its run (native/tracer.c, "held launchers"). */
export interface HeldLauncher {
  readonly slot: number;
  /** It ended (killed, or it could not join the cgroups) before a run took it. */
  readonly gone: boolean;
  /** Why it ended, once known. */
  readonly failure: string | null;
  /** Resolves once it is gone (reaped by the tracer: nothing of it is left in any cgroup). */
  readonly ended: Promise<void>;
}

export interface AttachFailure {
  error: string;
  /** bwrap's init, when it was known (still blocked: the caller kills it). */
  initPid: number | null;
  /** This host refuses ptrace attach (no CAP_SYS_PTRACE, yama): the tracer is now off for this process. */
  hostRefusesPtrace: boolean;
}

export interface LaunchExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Set when bwrap never ran (a failed step before its exec), or the tracer was lost. */
  spawnError: string | null;
}

export interface Launch {
  /** bwrap's host pid (`held`: started from the launcher held for it), or why it could not be started. */
  readonly started: Promise<{ pid: number; held: boolean } | { error: string }>;
  /** bwrap's init, traced (and, unless held, let go), or why not. */
  readonly init: Promise<{ pid: number } | AttachFailure>;
  /** bwrap's own end. */
  readonly exit: Promise<LaunchExit>;
  readonly trace: TraceRun;
  /** Lets a held init go on. */
  release(): void;
  /** A parked run (a sandbox waiting in the pool for its program) does not keep node alive. */
  park(on: boolean): void;
}

/**
 * Characters of event lines the host keeps for one run (64 Mi: a million ordinary lines). A program
 * can make lines as fast as the tracer stops it (a loop of failing opens of a 4,000-character path
 * under /root: ~90 MB a second); past this the rest is not kept and the trace is incomplete.
 */
export const MAX_TRACE_CHARS = 64 << 20;

interface RunState extends TraceRun {
  /** Characters of `lines` so far (each line counts 32 more: what a string costs beyond its text). */
  chars: number;
  finish: () => void;
  onStarted: (r: { pid: number; held: boolean } | { error: string }) => void;
  onInit: (r: { pid: number } | AttachFailure) => void;
  onExit: (r: LaunchExit) => void;
  spawnError: string | null;
}

/** `B err <ptrace|rlimit> <errno> <init pid>` -> a failure. */
function attachError(step: string | undefined, errno: string | undefined, initPid: string | undefined): AttachFailure {
  const pid = initPid ? Number(initPid) : null;
  if (step !== 'ptrace') return { error: `cannot set RLIMIT_NPROC on the sandbox's init (errno ${errno ?? '?'})`, initPid: pid, hostRefusesPtrace: false };
  const hostRefusesPtrace = errno === '1' || errno === '13'; // EPERM, EACCES
  if (hostRefusesPtrace) refused = `this host refuses ptrace attach (errno ${errno}): syscalls are observed with strace instead`;
  return { error: `ptrace attach failed (CAP_SYS_PTRACE or yama ptrace_scope?) (errno ${errno ?? '?'})`, initPid: pid, hostRefusesPtrace };
}

/** A promise and its resolver; later calls of the resolver are ignored. */
function settleOnce<T>(): [Promise<T>, (v: T) => void] {
  let settle!: (v: T) => void;
  const p = new Promise<T>((resolve) => (settle = resolve));
  return [p, settle];
}

const signalName = (n: number): NodeJS.Signals => (Object.entries(constants.signals).find(([, v]) => v === n)?.[0] ?? `SIG${n}`) as NodeJS.Signals;
const hexField = (s: string): string => `x${Buffer.from(s, 'utf8').toString('hex')}`;

export class SyscallTracer {
  private child: ChildProcessWithoutNullStreams | null = null;
  private readonly runs = new Map<number, RunState>();
  private readonly parked = new Set<number>();
  /** Held launchers not yet taken: they do not keep node alive. */
  private readonly holding = new Set<number>();
  private nextId = 1;
  private buf = '';

  constructor(private readonly binary: string) {}

  private start(): ChildProcessWithoutNullStreams {
    if (this.child) return this.child;
    const c = spawn(this.binary, [], { stdio: ['pipe', 'pipe', 'pipe'], env: {} });
    c.stdout.setEncoding('utf8');
    c.stdout.on('data', (d: string) => this.onData(d));
    c.stderr.resume();
    const fail = (why: string): void => {
      if (this.child === c) this.child = null;
      for (const [, r] of this.runs) this.lose(r, `the syscall tracer stopped (${why}): the trace of this run is incomplete`);
      this.runs.clear();
    };
    c.on('error', (e) => fail(e.message));
    c.on('close', (code, signal) => fail(signal ?? `exit ${code}`));
    c.stdin.on('error', () => undefined);
    this.child = c;
    this.idle();
    return c;
  }

  private lose(r: RunState, why: string): void {
    r.lost ??= why;
    r.onStarted({ error: why });
    r.onInit({ error: why, initPid: null, hostRefusesPtrace: false });
    r.onExit({ code: null, signal: null, spawnError: r.spawnError ?? why });
    r.finish();
  }

  private onData(d: string): void {
    this.buf += d;
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      const sp = line.indexOf(' ');
      const id = Number(line.slice(0, sp));
      const r = this.runs.get(id);
      if (!r) continue;
      const ev = line.slice(sp + 1);
      const f = ev.split(' ');
      if (ev === 'Z') {
        this.runs.delete(id);
        r.onInit({ error: r.spawnError ?? 'bwrap ended before its init was traced', initPid: null, hostRefusesPtrace: false });
        r.finish();
      } else if (f[0] === 'R' && f[1] === 'ok') r.onStarted({ pid: Number(f[2]), held: f[3] === 'held' });
      else if (f[0] === 'R') {
        // `R err <step> <errno>`. Steps before the fork end the run here (no W or Z follows); the child's
        // steps (cgroup, rlimit, fds, ids, exec) are followed by bwrap's exit and Z.
        r.spawnError ??= `starting bwrap failed at step "${f[2]}" (errno ${f[3]})`;
        r.onStarted({ error: r.spawnError });
        // (A held launcher that failed at fifo or request is killed, and its W and Z follow: ignored then.)
        if (['busy', 'request', 'fifo', 'pipe', 'fork'].includes(f[2] ?? '')) {
          this.runs.delete(id);
          this.lose(r, r.spawnError);
        }
      } else if (f[0] === 'B' && f[1] === 'err') r.onInit(attachError(f[2], f[3], f[4]));
      else if (f[0] === 'B') r.onInit({ pid: Number(f[1]) });
      else if (f[0] === 'M' && f[1] === 'err') r.lost ??= `the host's device nodes in the sandbox's /dev could not be made read-only (errno ${f[2]}): the program was killed before it ran`;
      else if (f[0] === 'W') r.onExit({ code: f[1] === '-' ? null : Number(f[1]), signal: f[2] === '-' ? null : signalName(Number(f[2])), spawnError: r.spawnError });
      else if (r.chars <= MAX_TRACE_CHARS) {
        r.chars += ev.length + 32;
        if (r.chars <= MAX_TRACE_CHARS) r.lines.push(ev);
        else {
          r.lost ??= `the trace of this run passed ${MAX_TRACE_CHARS >> 20} Mi characters of events (a flood of observed calls): the rest was not kept, so the trace is incomplete`;
          r.lines.length = 0;
        }
      }
    }
    this.idle();
  }

  /** Keep node alive only while a run is traced (an idle tracer must not hold the process open). */
  private idle(): void {
    const c = this.child;
    if (!c) return;
    for (const id of this.parked) if (!this.runs.has(id)) this.parked.delete(id);
    for (const id of this.holding) if (!this.runs.has(id)) this.holding.delete(id);
    const busy = this.runs.size > this.parked.size + this.holding.size;
    for (const s of [c.stdout, c.stderr, c.stdin] as unknown as { ref?: () => void; unref?: () => void }[]) (busy ? s.ref : s.unref)?.call(s);
    if (busy) c.ref();
    else c.unref();
  }

  private newRun(): [number, RunState, Pick<Launch, 'started' | 'init' | 'exit'>] {
    const id = this.nextId++;
    const [started, onStarted] = settleOnce<{ pid: number; held: boolean } | { error: string }>();
    const [init, onInit] = settleOnce<{ pid: number } | AttachFailure>();
    const [exit, onExit] = settleOnce<LaunchExit>();
    const [done, finish] = settleOnce<void>();
    const r: RunState = { lines: [], chars: 0, done, lost: null, finish: () => finish(), onStarted, onInit, onExit, spawnError: null };
    this.runs.set(id, r);
    return [id, r, { started, init, exit }];
  }

  /**
   * Forks a launcher that moves itself into these cgroups now and waits for a run (launch with
   * `held`). It does not keep node alive; it ends with the tracer, or when its cgroups are killed.
   */
  hold(cgroupProcs: string[]): HeldLauncher {
    const c = this.start();
    const [slot, r, { exit }] = this.newRun();
    this.holding.add(slot);
    const held = { slot, gone: false, failure: null as string | null, ended: r.done };
    void exit.then((e) => (held.failure = e.spawnError ?? (e.signal ? `killed by ${e.signal}` : `it exited (${e.code})`)));
    void r.done.then(() => (held.gone = true));
    this.idle();
    c.stdin.write(`H ${slot} ${hexField(cgroupProcs.join('\n'))}\n`);
    return held;
  }

  /** Ends a held launcher that no run took (it may still be joining its cgroups); resolves once it is gone. */
  cancelHeld(held: HeldLauncher): Promise<void> {
    if (this.runs.has(held.slot)) {
      this.holding.delete(held.slot); // awaited now: its end keeps node alive
      this.idle();
      this.child?.stdin.write(`C ${held.slot}\n`);
    }
    return held.ended;
  }

  /** Starts bwrap for one run: in its cgroups, with its rlimits, its init traced before the program starts. */
  launch(spec: LaunchSpec): Launch {
    const c = this.start();
    const [id, r, { started, init, exit }] = this.newRun();
    // A held launcher's own lines are of no one's interest once a run takes it: the tracer carries
    // the run's id from now on.
    if (spec.held) {
      this.runs.delete(spec.held.slot);
      this.holding.delete(spec.held.slot);
    }
    this.idle();
    const l = spec.limits;
    const request = [
      'R', id, spec.hold ? 1 : 0, l.cpuSoftS, l.cpuHardS, l.fsizeBytes ?? -1, l.asBytes ?? -1, l.nproc ?? -1, l.uid, l.group ? `${l.gid}:${l.group}` : l.gid,
      hexField(spec.stdoutFifo), hexField(spec.stderrFifo), hexField(spec.seccompFile),
      // The held launcher, or (gone meanwhile) one the tracer forks into the same cgroups.
      spec.held ? `h${spec.held.slot}${hexField(spec.cgroupProcs.join('\n'))}` : spec.cgroupProcs.length ? hexField(spec.cgroupProcs.join('\n')) : '-',
      ...spec.argv.map(hexField),
    ];
    c.stdin.write(`${request.join(' ')}\n`);
    const park = (on: boolean): void => {
      if (on && this.runs.has(id)) this.parked.add(id);
      else this.parked.delete(id);
      this.idle();
    };
    return { started, init, exit, trace: r, release: () => void this.child?.stdin.write(`G ${id}\n`), park };
  }

  /** Stop the tracer (tests; the process otherwise ends it by closing stdin at exit). */
  close(): void {
    this.child?.stdin.end();
    this.child = null;
  }
}

let tracer: SyscallTracer | null | undefined;
/** Why the tracer was turned off for this process after the host refused an attach, if it was. */
let refused: string | null = null;

/**
 * Why this host refuses this process's tracer an attach to its sandboxes' inits (yama, from
 * /proc/sys/kernel/yama/ptrace_scope), or null. Scope 1 allows a descendant, which the init is; 2
 * allows only CAP_SYS_PTRACE (root); 3 allows no one.
 */
export function ptraceRefusedBecause(isRoot: boolean, scope: string | null = readYamaScope()): string | null {
  const n = scope === null ? 0 : Number(scope.trim());
  if (n >= 3) return `yama ptrace_scope is ${n}: no process may attach`;
  if (n === 2 && !isRoot) return 'yama ptrace_scope is 2: only root may attach';
  return null;
}

function readYamaScope(): string | null {
  try {
    return readFileSync('/proc/sys/kernel/yama/ptrace_scope', 'utf8');
  } catch {
    return null; // no yama: ptrace's own rules (same user) apply
  }
}

/**
 * The process-wide tracer, or null when it cannot work here (no binary, an unsupported arch, a yama
 * setting that refuses the attach) or the operator chose strace (AIRLOCK_SYSCALL_TRACER=strace).
 * As root it starts each sandbox as its host user; as an ordinary user, as that user.
 */
export function syscallTracer(): SyscallTracer | null {
  if (process.env.AIRLOCK_SYSCALL_TRACER === 'strace' || refused) return null;
  if (tracer !== undefined) return tracer;
  const usable = (process.arch === 'x64' || process.arch === 'arm64') && ptraceRefusedBecause(process.getuid?.() === 0) === null;
  const bin = usable ? tracerBinaryPath() : null;
  tracer = bin ? new SyscallTracer(bin) : null;
  return tracer;
}
