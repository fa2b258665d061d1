// Sandboxes started ahead of need (issue 20, target 3), for runs without the network whose syscalls
// the host tracer observes. A pooled sandbox has everything a run started on request would have,
// made the same way: its root-owned folder, its capped tmpfs for /out, /tmp and /dev/shm, its cgroup
// with the run's memory and pids limits, and bwrap started by the tracer in that group under the
// run's rlimits, traced from the init on. Its first program is airlock-exec (native/exec-shim.c),
// waiting on a unix socket for the one command it will ever run. A request takes one, has its
// directory scopes' overlays mounted, stages its inputs into /in, sends the command and goes on as a
// run started on request (runner.ts); afterwards the sandbox is destroyed like any run's. No sandbox
// serves two runs.
//
// Directory scopes: a scope is opened by its agent when the request comes, never before (what the
// sandbox sees is the scope as it is then, through the agent's descriptor). What the pooled sandbox
// has is the scope's mount point, bound at the scope's path inside and shared on the host side, so
// that the overlay mounted on it at the hand-over appears in the waiting sandbox (mount propagation:
// bwrap makes its copy of the host's mounts a slave of them).
//
// Pools are keyed by shape, what is fixed when the sandbox starts (the limits the kernel holds, the
// scopes' paths and read-only flags): the first run of a shape starts cold and asks for the pool of its shape; at most
// MAX_SHAPES shapes are kept, the least recently used dropped. A pooled sandbox that dies while it
// waits is removed and reported.
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { nativeBinaryPath } from '../../base/native.js';
import { ownerTag } from '../../base/owner.js';
import { createRunCgroup, type RunCgroup } from '../cgroup/index.js';
import type { HostCapabilities } from '../doctor.js';
import { syscallTracer } from '../observe/tracer.js';
import { rootPlan, type RootPlan } from '../rootfs.js';
import type { Limits, NsRunSpec } from '../types.js';
import { namespaceArgs, observeFilterIn, READ_ONLY_ROOT } from './bwrap-args.js';
import { hostOps } from './hostops.js';
import { launchWithTracer, rlimitBackstops, type SandboxLaunch } from './launch.js';
import { folderArgs, makeRunFolders, removeRunFolders, runFolders, type RunFolders } from './run-folders.js';
import { mkdirModeSync, mounter, stagingBase, type Mounter } from './staging.js';
import { sandboxIds, type RunIds } from '../run-ids.js';

/** Where the sandbox's first program and its command socket are, inside the sandbox. */
export const LAUNCHER_IN_SANDBOX = '/.airlock/exec';
const MAX_SHAPES = 4;
/** A shape whose pooled sandboxes keep dying this many times in a row is not pooled any more. */
const MAX_FAILURES = 3;

/** A directory scope's places in a pooled sandbox: its overlay is mounted on `merged` at the hand-over. */
export interface PooledScope {
  upper: string;
  work: string;
  merged: string;
}

export interface PooledSandbox {
  readonly runId: string;
  readonly folders: RunFolders;
  /** Per declared scope (the spec's order): where its overlay goes; `merged` is bound at the scope's path inside. */
  readonly scopes: PooledScope[];
  readonly cg: RunCgroup | null;
  /** The host uid and gid it runs as (given back by whoever removes its folders). */
  readonly ids: RunIds;
  readonly launch: SandboxLaunch;
  /** The root plan it was built with: a sandbox from an older plan (the host's /etc changed) is not used. */
  readonly plan: RootPlan;
  /** Sends the one command (cwd, argv with argv[0] absolute, env): null when sent, else why not. */
  start(cwd: string, argv: string[], env: Record<string, string>): string | null;
  /** The run is over (or the sandbox is dropped): closes the command socket. */
  close(): void;
}

/** A command as airlock-exec reads it: 4-byte LE length, then NUL-terminated cwd, argc, argv..., NAME=value... */
function encodeCommand(cwd: string, argv: string[], env: Record<string, string>): Buffer {
  const body = Buffer.from([cwd, String(argv.length), ...argv, ...Object.entries(env).map(([k, v]) => `${k}=${v}`)].map((s) => `${s}\0`).join(''), 'utf8');
  const head = Buffer.alloc(4);
  head.writeUInt32LE(body.length);
  return Buffer.concat([head, body]);
}

/**
 * The limits fixed when a sandbox starts: its cgroup's memory and pids, its tmpfs caps, and RLIMIT_CPU
 * in whole seconds. The rest (wall time, the exact CPU time the host polls for, the stream caps) are the
 * host's, applied per run from the request: runs that differ only there share a pool.
 */
const startLimits = (l: Limits): number[] => [l.memoryBytes, l.pids, l.outBytes, l.tmpBytes, l.files, Math.ceil(l.cpuMs / 1000)];

/** What a pooled sandbox is made for: the run's limits and its declared directory scopes (path, read-only). */
export interface ShapeSpec {
  limits: Limits;
  scopes: { hostPath: string; readOnly: boolean }[];
}

/** The pool a run may take from (its limits and scopes), when it has no network and is traced; else null. */
export function poolShape(spec: NsRunSpec): string | null {
  if (spec.network !== undefined || spec.traceSyscalls === false) return null;
  return JSON.stringify([startLimits(spec.limits), (spec.scopes ?? []).map((sc) => [sc.hostPath, sc.readOnly === true])]);
}

/** Whether a sandbox of this shape waits (a scoped run opens its scopes first, then takes it). */
export function poolHas(shape: string): boolean {
  return (shapes.get(shape)?.idle.length ?? 0) > 0;
}

interface Shape {
  spec: ShapeSpec;
  idle: PooledSandbox[];
  starting: number;
  failures: number;
}

let size = 0;
let accepts: (shape: ShapeSpec) => boolean = () => true;
let caps: HostCapabilities | null = null;
const shapes = new Map<string, Shape>();
/** Why pooling is off on this host, once found (no tracer, not root, airlock-exec not built). */
let unavailable: string | null = null;

/**
 * How many sandboxes to keep waiting per shape (0: none, the default; a service sets it), and, when
 * given, which shapes only (a bench keeps its runs with a scope started on request). Lowering it, or
 * leaving a shape out, drops the surplus at once.
 */
export function configureSandboxPool(n: number, only: (shape: ShapeSpec) => boolean = () => true): void {
  size = Math.max(0, Math.floor(n));
  accepts = only;
  for (const s of shapes.values()) for (const p of s.idle.splice(accepts(s.spec) ? size : 0)) drop(p);
}

/** Forgets the shapes `match` picks: their waiting sandboxes are dropped, and one still starting is dropped when it is ready. */
export function dropPoolShapes(match: (shape: ShapeSpec) => boolean): void {
  for (const [k, s] of [...shapes]) {
    if (!match(s.spec)) continue;
    shapes.delete(k);
    for (const p of s.idle.splice(0)) drop(p);
  }
}

let served = 0;

/** What the pool holds now (sandboxes waiting and starting), how many runs it served, and why it is off, if it is. */
export function sandboxPoolState(): { size: number; waiting: number; starting: number; served: number; unavailable: string | null } {
  let waiting = 0;
  let starting = 0;
  for (const s of shapes.values()) {
    waiting += s.idle.length;
    starting += s.starting;
  }
  return { size, waiting, starting, served, unavailable };
}

/** A waiting sandbox of this shape built with the current root plan, or null (the caller starts one on request). */
export function takePooled(shape: string, plan: RootPlan): PooledSandbox | null {
  const s = shapes.get(shape);
  if (!s) return null;
  touch(shape, s);
  for (let p = s.idle.shift(); p; p = s.idle.shift()) {
    if (p.plan === plan) {
      p.launch.park(false);
      served++;
      return p;
    }
    drop(p);
  }
  return null;
}

/** After a run of this shape: keep `size` of its sandboxes waiting (started in the background). */
export function refillPool(shape: string, spec: ShapeSpec, hostCaps: HostCapabilities): void {
  if (size === 0 || unavailable || !accepts(spec)) return;
  caps = hostCaps;
  let s = shapes.get(shape);
  if (!s) {
    s = { spec, idle: [], starting: 0, failures: 0 };
    shapes.set(shape, s);
    for (const [k, old] of [...shapes].slice(0, Math.max(0, shapes.size - MAX_SHAPES))) {
      shapes.delete(k);
      for (const p of old.idle.splice(0)) drop(p);
    }
  }
  touch(shape, s);
  const shapeNow = s;
  while (shapeNow.failures < MAX_FAILURES && shapeNow.idle.length + shapeNow.starting < size) {
    shapeNow.starting++;
    void startSandbox(caps, shapeNow.spec).then(
      (p) => {
        shapeNow.starting--;
        if (shapes.get(shape) !== shapeNow || shapeNow.idle.length >= size) return drop(p);
        shapeNow.failures = 0;
        shapeNow.idle.push(p);
        // One that dies while it waits (killed, the tracer lost) is removed; the next run starts its own.
        void p.launch.closed.then(() => {
          const i = shapeNow.idle.indexOf(p);
          if (i < 0) return;
          shapeNow.idle.splice(i, 1);
          shapeNow.failures++;
          drop(p);
          process.emitWarning(`airlock: a sandbox waiting in the pool ended before it was used (${p.runId}); ${shapeNow.failures >= MAX_FAILURES ? 'this shape is no longer pooled' : 'it will be replaced after the next run'}`);
        });
      },
      (e: Error) => {
        shapeNow.starting--;
        shapeNow.failures++;
        if ((e as { unavailable?: boolean }).unavailable) unavailable = e.message;
        else process.emitWarning(`airlock: cannot start a sandbox ahead of need: ${e.message}`);
      },
    );
  }
}

/** Kills and removes every waiting sandbox (a service's shutdown; a process that just exits is cleaned by its staging's exit hook). */
export async function closeSandboxPool(): Promise<void> {
  size = 0;
  const all = [...shapes.values()].flatMap((s) => s.idle.splice(0));
  shapes.clear();
  await Promise.all(all.map(drop));
}

function touch(key: string, s: Shape): void {
  shapes.delete(key);
  shapes.set(key, s);
}

/** Kills a sandbox that will not run anything, and removes its group, mounts and folder. */
async function drop(p: PooledSandbox): Promise<void> {
  p.launch.park(false); // its end is awaited: it holds the process open again until then
  p.close();
  await p.cg?.killAll().catch(() => undefined);
  p.launch.kill();
  await p.launch.closed;
  await dropFolders(p.folders, p.cg, p.ids);
}

/** Its folders and group removed, and only then (nothing of it left) its uid given back. */
async function dropFolders(f: RunFolders, cg: RunCgroup | null, ids: RunIds): Promise<void> {
  const errors = await removeRunFolders(f, cg, caps!);
  if (errors.length > 0) process.emitWarning(`airlock: cleanup of pooled sandbox ${f.dir} incomplete: ${errors.join('; ')}`);
  else ids.release();
}

const unavailableError = (message: string): Error => Object.assign(new Error(message), { unavailable: true });

/** A directory scope's upper and work dirs on the run's disk tmpfs, and its mount point bound onto itself, shared. */
async function scopePlaces(f: RunFolders, i: number, mnt: Mounter, user: { uid: number; gid: number }): Promise<PooledScope> {
  const rw = join(f.sharedDisk ?? f.dir, `scope${i}`);
  const p = { upper: join(rw, 'upper'), work: join(rw, 'work'), merged: join(f.dir, `scope${i}`, 'merged') };
  mkdirModeSync(rw, 0o711);
  if (join(p.merged, '..') !== rw) mkdirModeSync(join(p.merged, '..'), 0o711);
  for (const d of [p.upper, p.work, p.merged]) mkdirModeSync(d, 0o755);
  chownSync(p.upper, user.uid, user.gid);
  await mnt.sharedSelfBind(p.merged);
  f.mounted.push(p.merged);
  return p;
}

/** Starts one sandbox of a shape, through the same steps as a run started on request, up to its program. */
async function startSandbox(c: HostCapabilities, shape: ShapeSpec): Promise<PooledSandbox> {
  const limits = shape.limits;
  const tracer = syscallTracer();
  const shim = nativeBinaryPath('airlock-exec');
  if (!tracer || !c.isRoot || !c.sandboxHostUser || !c.bwrap) throw unavailableError('sandboxes are started ahead of need only as root with the host tracer');
  if (!shim) throw unavailableError('airlock-exec is not built (npm run build needs a C compiler)');
  const plan = await rootPlan(c);
  const mnt = mounter(c, hostOps(c.perlBinary));
  const ids = sandboxIds(c, { hasScope: shape.scopes.length > 0 });
  if ('code' in ids) throw new Error(ids.message);
  const base = await stagingBase(mnt, ids).catch((e: unknown) => {
    ids.release();
    throw e;
  });
  const runId = `ns-${ownerTag()}-${randomBytes(4).toString('hex')}`;
  const folders = runFolders(base, runId, c);
  let cg: RunCgroup | null = null;
  let server: Server | null = null;
  let launch: SandboxLaunch | null = null;
  try {
    await makeRunFolders(folders, mnt, limits, ids, true);
    if (c.cgroup.usable) cg = createRunCgroup(c.cgroup, runId, { memoryBytes: limits.memoryBytes, pids: limits.pids + 1 });
    // A scope's overlay is mounted at the hand-over, from the scope's agent opened then (never at this
    // point): here its mount point is bound, shared, so that the overlay reaches the sandbox.
    const scopes = await Promise.all(shape.scopes.map((_, i) => scopePlaces(folders, i, mnt, ids)));
    // /.airlock: the command socket (only the sandbox's ids may connect) and airlock-exec bound over an empty file.
    const ctl = join(folders.dir, 'ctl');
    mkdirModeSync(ctl, 0o755);
    writeFileSync(join(ctl, 'exec'), '', { mode: 0o444 });
    const sockPath = join(ctl, 'cmd.sock');
    const connected = new Promise<Socket>((resolve, reject) => {
      server = createServer({ pauseOnConnect: true }, (sock) => {
        server?.close(); // one connection, ever
        resolve(sock);
      });
      server.once('error', reject);
      server.listen(sockPath);
    });
    await new Promise<void>((resolve, reject) => {
      server!.once('listening', resolve);
      server!.once('error', reject);
    });
    chownSync(sockPath, ids.uid, ids.gid);
    chmodSync(sockPath, 0o600);
    const cpuS = Math.ceil(limits.cpuMs / 1000);
    const scopeArgs = shape.scopes.flatMap((sc, i) => [sc.readOnly ? '--ro-bind' : '--bind', scopes[i]!.merged, sc.hostPath]);
    const args = [...namespaceArgs(c.bwrap), ...plan.args, ...folderArgs(folders, limits), ...scopeArgs, '--ro-bind', ctl, '/.airlock', '--ro-bind', shim, LAUNCHER_IN_SANDBOX, ...READ_ONLY_ROOT, '--clearenv', '--chdir', '/', '--info-fd', '3', '--block-fd', '4', '--seccomp', '5', '--', LAUNCHER_IN_SANDBOX];
    launch = launchWithTracer(tracer, {
      argv: [c.bwrap.path, ...args],
      stdoutFifo: join(folders.dir, 'stdout'),
      stderrFifo: join(folders.dir, 'stderr'),
      seccompFile: observeFilterIn(base),
      cgroupProcs: cg ? cg.dirs.map((d) => join(d, 'cgroup.procs')) : [],
      limits: { cpuSoftS: cpuS, cpuHardS: cpuS + 1, fsizeBytes: c.tmpfsSizeCaps.hostOut ? null : limits.outBytes, ...rlimitBackstops(cg, limits), uid: ids.uid, gid: ids.gid, group: ids.group },
      hold: false,
    });
    launch.park(true);
    // Flowing while it waits, so that its end is seen (the run's capture takes over at the hand-over,
    // before the command is sent: nothing of the program's output is lost).
    launch.stdout.resume();
    launch.stderr.resume();
    const ready = await launch.ready;
    if ('error' in ready) throw new Error(ready.error);
    // Waiting means airlock-exec connected: everything before the program is done.
    const sock = await Promise.race([connected, launch.closed.then(() => null)]);
    if (!sock) throw new Error('the sandbox ended before its first program was ready');
    sock.unref();
    sock.on('error', () => undefined);
    let sent = false;
    return {
      runId,
      folders,
      scopes,
      cg,
      ids,
      launch,
      plan,
      start(cwd, argv, env) {
        if (sent || sock.destroyed) return 'the pooled sandbox is no longer waiting';
        sent = true;
        sock.ref();
        sock.write(encodeCommand(cwd, argv, env));
        return null;
      },
      close: () => void sock.destroy(),
    };
  } catch (e) {
    (server as Server | null)?.close();
    await cg?.killAll().catch(() => undefined);
    if (launch) {
      launch.kill();
      await launch.closed;
    }
    await dropFolders(folders, cg, ids);
    throw e;
  }
}
