// Starting bwrap for one run, two ways behind one shape:
//   * through the host tracer (observe/tracer.ts): the tracer forks and execs bwrap already in the run's
//     cgroups and under its rlimits, and traces bwrap's init before letting it go. Node is not forked
//     (a fork of this large process cost ~2-3 ms of blocked event loop per run), and no step needs a
//     round trip through node. stdout and stderr arrive through FIFOs the tracer made; bwrap's open of
//     them waits for our readers.
//   * with node's spawn (no tracer built, not root, or the host refuses ptrace): node holds bwrap's
//     init on --block-fd while `prepare` moves it into the cgroups and sets its rlimits.
// Either way the caller gets the init's pid while it is still blocked, and lets it go with release().
import { spawn, type StdioOptions } from 'node:child_process';
import { closeSync, constants, openSync, readdirSync, readFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import type { Launch, LaunchSpec, SyscallTracer, TraceRun } from '../observe/tracer.js';
import type { RunCgroup } from '../cgroup/index.js';
import type { Limits } from '../types.js';
import { findSystemBinary } from '../doctor.js';

/**
 * The rlimits that stand in where no cgroup counts memory or processes (a user nothing was delegated
 * to), so that a hog cannot take the host down; weaker than a cgroup, they do not count as
 * enforcement. RLIMIT_AS goes on bwrap; RLIMIT_NPROC only on bwrap's init, inside its user namespace
 * (by the tracer, or the host helper): set on bwrap before it made that namespace, it would count
 * every process of the user on the host.
 */
export function rlimitBackstops(cg: RunCgroup | null, limits: Limits): { asBytes: number | null; nproc: number | null } {
  return { asBytes: cg?.enforces.memory ? null : limits.memoryBytes, nproc: cg?.enforces.pids ? null : limits.pids };
}

export type LaunchReady = { initPid: number } | { error: string; initPid: number | null; tracerRefused: boolean };

export interface SandboxLaunch {
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** bwrap's init, blocked, in its cgroups, with its rlimits (and traced, by the tracer) — or why not. */
  readonly ready: Promise<LaunchReady>;
  release(): void;
  /** bwrap ended and the sandbox's stdout and stderr are closed (every process holding them is gone). */
  readonly closed: Promise<{ code: number | null; signal: NodeJS.Signals | null; spawnError: string | null }>;
  /** SIGKILL bwrap itself (its init and the program are the cgroup's, or the caller's, to kill). */
  kill(): void;
  /** The trace of this run, once the init is traced (tracer launches only). */
  readonly trace: TraceRun | null;
  /** bwrap's host pid, once known. */
  bwrapPid(): number | null;
  /** bwrap was started from the launcher held ahead of need for it (ns/held.ts), not forked for it. */
  fromHeld(): boolean;
  /** Parked (a sandbox waiting in the pool), the launch does not keep node alive (tracer launches). */
  park(on: boolean): void;
}

const ended = (s: Readable): Promise<void> => new Promise((resolve) => s.once('close', () => resolve()));

export function launchWithTracer(tracer: SyscallTracer, spec: LaunchSpec): SandboxLaunch {
  const l: Launch = tracer.launch(spec);
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let pid: number | null = null;
  let held = false;
  let traced = false;
  let exited = false;
  const sockets: Socket[] = [];
  const opened: string[] = [];
  let parked = false;
  // bwrap is gone: a writer that never came (a child killed before it opened the FIFOs, e.g. by the
  // OOM killer under a tiny memory limit) never will. Opening and closing a writer of our own lets
  // each reader see the end once it has read what the real writers left.
  const endReaders = (paths: string[]): void => {
    for (const p of paths) {
      try {
        closeSync(openSync(p, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        /* no reader (ENXIO) or no FIFO: nothing waits on it */
      }
    }
  };
  const kill = (): void => {
    if (pid === null) return;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  };
  void l.started.then((s) => {
    if ('error' in s) {
      stdout.end();
      stderr.end();
      return;
    }
    pid = s.pid;
    held = s.held;
    // The FIFOs exist now, and bwrap's open for writing waits for our reader: opened here, before any
    // writer, a reader sees the writers' end (a reader opened after they were gone never would).
    for (const [path, into] of [[spec.stdoutFifo, stdout], [spec.stderrFifo, stderr]] as const) {
      try {
        const sock = new Socket({ fd: openSync(path, constants.O_RDONLY | constants.O_NONBLOCK), readable: true, writable: false });
        sock.on('error', () => into.end());
        sock.pipe(into);
        if (parked) sock.unref();
        sockets.push(sock);
        opened.push(path);
        if (exited) endReaders([path]);
      } catch {
        into.end();
        kill(); // it would wait for this reader forever
      }
    }
  });
  // A step before bwrap's exec failed: no writer may ever have come, so no end of file would either.
  void l.exit.then((e) => {
    exited = true;
    if (!e.spawnError) return endReaders(opened);
    for (const sock of sockets) sock.destroy();
    stdout.end();
    stderr.end();
  });
  const ready = l.init.then((r): LaunchReady => {
    if ('error' in r) return { error: r.error, initPid: r.initPid, tracerRefused: r.hostRefusesPtrace };
    traced = true;
    return { initPid: r.pid };
  });
  const closed = Promise.all([l.exit, ended(stdout), ended(stderr)]).then(([e]) => e);
  return {
    stdout,
    stderr,
    ready,
    release: () => (spec.hold ? l.release() : undefined),
    closed,
    kill,
    get trace() {
      return traced ? l.trace : null;
    },
    bwrapPid: () => pid,
    fromHeld: () => held,
    park: (on) => {
      parked = on;
      for (const sock of sockets) (on ? sock.unref : sock.ref).call(sock);
      l.park(on);
    },
  };
}

export interface NodeLaunchSpec {
  /** The command: bwrap and its arguments (maybe behind prlimit and strace), with fds 3, 4, 5 as in LaunchSpec. */
  cmd: string[];
  /**
   * Drop to these ids before exec (when root and not under strace, which drops by itself), with
   * `group` as the one supplementary group (node's spawn clears them all: setpriv sets it).
   */
  ids: { uid: number; gid: number; group?: number | null } | null;
  /** The seccomp filter, written to fd 5. */
  filter: Buffer;
  /** Moves the blocked init into its cgroups and sets its rlimits; null when done, else the error. */
  prepare: (initPid: number) => Promise<string | null>;
  /** A pipe to the program's stdin (a long-lived Monty worker reads its jobs there); else one ended at once. */
  stdin?: boolean;
}

/** How long a node launch's pipes may stay open after its process exited (what they still carry is read meanwhile). */
const EXIT_GRACE_MS = 1000;

const O_CLOEXEC = 0o2000000;

/**
 * The descriptors above 5 this process holds without close-on-exec: ones it inherited (a shell's
 * redirection, a CI runner's pipe, socket activation; node opens its own with O_CLOEXEC). node's
 * spawn would pass each on to bwrap, which passes it on to the program.
 */
function inheritedFds(): number[] {
  const fds: number[] = [];
  for (const name of readdirSync('/proc/self/fd')) {
    const fd = Number(name);
    if (!(fd > 5)) continue;
    try {
      const flags = /^flags:\s*([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'));
      if (flags && (parseInt(flags[1]!, 8) & O_CLOEXEC) === 0) fds.push(fd);
    } catch {
      // gone meanwhile (the directory's own descriptor among them)
    }
  }
  return fds;
}

/** A long-lived launch (a Monty worker) may let the process exit while it idles: `ref(false)`. */
export function launchWithNode(spec: NodeLaunchSpec): SandboxLaunch & { stdin: Writable | null; ref(on: boolean): void } {
  // stdin is a pipe even with nothing to send: a descriptor of the host's /dev/null (spawn's 'ignore')
  // would let the program set that file's times (futimens(0)) past the sandbox's read-only mounts.
  // node's pipes are socket pairs: the program cannot reopen it by name (`cat /dev/stdin`: ENXIO).
  const stdio: StdioOptions = ['pipe', 'pipe', 'pipe', 'pipe', 'pipe', 'pipe'];
  // node's spawn closes nothing: each inherited descriptor is covered in the child by a socket pair of
  // ours, ended at once (libuv dup2s over it), so no host file, pipe or socket reaches the sandbox.
  const inherited = inheritedFds();
  for (let fd = stdio.length; fd <= Math.max(-1, ...inherited); fd++) stdio.push(inherited.includes(fd) ? 'pipe' : 'ignore');
  // node's spawn drops every supplementary group with the ids (libuv: setgroups(0)): a group to keep
  // is set by setpriv, exec'd as root in the child's place (the same pid), which drops before bwrap.
  const ids = spec.ids;
  const setpriv = ids?.group ? findSystemBinary('setpriv') : null;
  if (ids?.group && !setpriv) throw new Error('setpriv (util-linux) is needed to start the sandbox with the sandbox user\'s group as a supplementary group');
  const cmd = ids?.group ? [setpriv!, '--reuid', String(ids.uid), '--regid', String(ids.gid), '--groups', String(ids.group), '--', ...spec.cmd] : spec.cmd;
  const child = spawn(cmd[0]!, cmd.slice(1), { stdio, env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' }, ...(ids && !ids.group ? { uid: ids.uid, gid: ids.gid } : {}) });
  const extra = child.stdio as unknown as (Readable & Writable)[];
  child.stdin?.on('error', () => undefined);
  if (!spec.stdin) child.stdin?.end();
  for (const s of extra.slice(6)) s?.destroy();
  const info: Readable = extra[3]!;
  const block: Writable = extra[4]!;
  const sec: Writable = extra[5]!;
  for (const s of [info, block, sec]) s.on('error', () => undefined);
  sec.end(spec.filter);
  let spawnError: string | null = null;
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null; spawnError: string | null }>((resolve) => {
    child.on('error', (e) => {
      spawnError = `cannot start the sandbox: ${e.message}`;
      resolve({ code: null, signal: null, spawnError });
    });
    child.on('close', (code, signal) => resolve({ code, signal, spawnError }));
    // Its pipes end with it, unless another process still holds one (the caller kills the run's
    // cgroup after this resolves): after a grace period, stop waiting for them.
    child.on('exit', (code, signal) => {
      setTimeout(() => {
        for (const s of [child.stdout, child.stderr, ...extra.slice(3)]) s?.destroy();
        resolve({ code, signal, spawnError });
      }, EXIT_GRACE_MS).unref();
    });
  });
  // bwrap tells its init's pid on --info-fd while the init waits on --block-fd.
  const ready = new Promise<LaunchReady>((resolve) => {
    let text = '';
    const onData = (d: Buffer): void => {
      text += d.toString('utf8');
      const m = /"child-pid"\s*:\s*(\d+)/.exec(text);
      if (!m && text.length < 4096) return;
      info.off('data', onData);
      if (!m) return resolve({ error: 'bwrap did not report its init', initPid: null, tracerRefused: false });
      const initPid = Number(m[1]);
      void spec.prepare(initPid).then((error) => resolve(error === null ? { initPid } : { error, initPid, tracerRefused: false }));
    };
    info.on('data', onData);
    void closed.then(() => resolve({ error: 'bwrap ended before the sandbox was set up', initPid: null, tracerRefused: false }));
  });
  return {
    stdin: spec.stdin ? child.stdin : null,
    ref: (on) => {
      // A closed pipe (bwrap's setup fds once used) has no handle left: ref() on it would only queue a listener.
      for (const s of [child, child.stdin, child.stdout, child.stderr, ...extra.slice(3)] as unknown as { ref?: () => void; unref?: () => void; destroyed?: boolean }[]) if (s && !s.destroyed) (on ? s.ref : s.unref)?.call(s);
    },
    stdout: child.stdout!,
    stderr: child.stderr!,
    ready,
    release: () => block.end('x'),
    closed,
    kill: () => child.kill('SIGKILL'),
    trace: null,
    bwrapPid: () => child.pid ?? null,
    fromHeld: () => false,
    park: () => undefined, // node launches are never pooled
  };
}
