// The host's syscall tracer (native/tracer.c, built by `npm run build` when a C compiler is present):
// one long-lived root process that attaches to each ns run's sandbox init while bwrap holds it on
// --block-fd, and reports the program's observed syscalls as lines on its stdout. The program cannot
// reach this process or its pipe: nothing it does can forge or erase a line. Without the binary (no
// compiler) or without root, the runner falls back to strace (slower, same observations).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** native/airlock-tracer under dist/: above this module (tsc output) or above the bundle. */
export function tracerBinaryPath(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++, dir = dirname(dir)) {
    const p = join(dir, 'native', 'airlock-tracer');
    if (existsSync(p)) return p;
  }
  return null;
}

/** One run's trace: event lines (without the run id), complete once `done` resolves. */
export interface TraceRun {
  readonly lines: string[];
  /** Resolves when every traced task of the run is gone, or the tracer was lost (`lost` says why). */
  readonly done: Promise<void>;
  lost: string | null;
}

interface RunState extends TraceRun {
  finish: () => void;
  attached: ((failure: AttachFailure | null) => void) | null;
}

export interface AttachFailure {
  error: string;
  /** This host refuses ptrace attach (no CAP_SYS_PTRACE, yama): the tracer is now off for this process. */
  hostRefusesPtrace: boolean;
}

/** `A err <step> <errno>` -> a failure. */
function attachError(ev: string): AttachFailure {
  const [, , step, errno] = ev.split(' ');
  const hostRefusesPtrace = step === 'ptrace' && (errno === '1' || errno === '13'); // EPERM, EACCES
  const what = step === 'rlimit' ? 'setting the rlimits failed' : step === 'ptrace' ? 'ptrace attach failed (CAP_SYS_PTRACE or yama ptrace_scope?)' : 'too many runs traced at once';
  if (hostRefusesPtrace) refused = `this host refuses ptrace attach (errno ${errno}): syscalls are observed with strace instead`;
  return { error: `${what} (errno ${errno ?? '?'})`, hostRefusesPtrace };
}

/** What the tracer sets on the process before attaching (RLIMIT_CORE is always 0). */
export interface AttachLimits {
  cpuSoftS: number;
  cpuHardS: number;
  /** RLIMIT_FSIZE in bytes, or null to leave it. */
  fsizeBytes: number | null;
  /** The ids the process runs as. */
  uid: number;
  gid: number;
}

export class SyscallTracer {
  private child: ChildProcessWithoutNullStreams | null = null;
  private readonly runs = new Map<number, RunState>();
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
    r.attached?.({ error: why, hostRefusesPtrace: false });
    r.attached = null;
    r.finish();
  }

  private onData(d: string): void {
    this.buf += d;
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      const sp = line.indexOf(' ');
      const r = this.runs.get(Number(line.slice(0, sp)));
      if (!r) continue;
      const ev = line.slice(sp + 1);
      if (ev === 'Z') {
        this.runs.delete(Number(line.slice(0, sp)));
        r.finish();
      } else if (ev.startsWith('A ')) {
        r.attached?.(ev === 'A ok' ? null : attachError(ev));
        r.attached = null;
        if (ev !== 'A ok') {
          this.runs.delete(Number(line.slice(0, sp)));
          r.finish();
        }
      } else r.lines.push(ev);
    }
    this.idle();
  }

  /** Keep node alive only while a run is traced (an idle tracer must not hold the process open). */
  private idle(): void {
    const c = this.child;
    if (!c) return;
    const busy = this.runs.size > 0;
    for (const s of [c.stdout, c.stderr, c.stdin] as unknown as { ref?: () => void; unref?: () => void }[]) (busy ? s.ref : s.unref)?.call(s);
    if (busy) c.ref();
    else c.unref();
  }

  /**
   * Sets the rlimits of `pid` (a process blocked before running anything of the program), then attaches
   * to it and everything it starts from then on. Resolves once the tracer holds it: only then may the
   * process go on.
   */
  attach(pid: number, limits: AttachLimits): Promise<{ run: TraceRun } | AttachFailure> {
    const c = this.start();
    const id = this.nextId++;
    let finish!: () => void;
    const done = new Promise<void>((resolve) => (finish = resolve));
    return new Promise((resolve) => {
      const r: RunState = {
        lines: [],
        done,
        lost: null,
        finish,
        attached: (failure) => resolve(failure ?? { run: r }),
      };
      this.runs.set(id, r);
      this.idle();
      const l = limits;
      c.stdin.write(`A ${id} ${pid} ${l.cpuSoftS} ${l.cpuHardS} ${l.fsizeBytes ?? -1} ${l.uid} ${l.gid}\n`);
    });
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
 * The process-wide tracer, or null when it cannot work here (no binary, not root, unsupported arch)
 * or the operator chose strace (AIRLOCK_SYSCALL_TRACER=strace, e.g. where ptrace attach is forbidden).
 */
export function syscallTracer(): SyscallTracer | null {
  if (process.env.AIRLOCK_SYSCALL_TRACER === 'strace' || refused) return null;
  if (tracer !== undefined) return tracer;
  const bin = process.getuid?.() === 0 && (process.arch === 'x64' || process.arch === 'arm64') ? tracerBinaryPath() : null;
  tracer = bin ? new SyscallTracer(bin) : null;
  return tracer;
}
