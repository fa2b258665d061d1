// Starts one Monty worker process (monty-worker.ts) inside a sandbox of its own, the way the ns lane
// starts bwrap (ns/launch.ts, launchWithNode): bwrap is spawned as the sandbox's host user
// (sandbox-user.ts: airlock-sandbox, else nobody), its init is held on --block-fd while the host
// moves it into the worker's cgroup (memory, pids, CPU accounting) and sets RLIMIT_CORE=0, then
// node starts under the worker's seccomp allowlist with:
//   * every namespace of its own (user, pid, network: empty, ipc, uts, cgroup), no capabilities,
//     --die-with-parent, a new session, an empty environment;
//   * a read-only root: the ns lane's (/usr, a generated /etc, node's prefix, /proc of its own pid
//     namespace, a minimal /dev), plus /airlock with the worker's folder, @pydantic/monty and a
//     package.json, all read-only;
//   * one writable place: /w, a size-capped tmpfs (charged to the worker's memory cgroup too), where
//     each run's /in and /out live while it runs.
// Without a usable bwrap (no bubblewrap, no user namespaces, no seccomp) the worker is a plain child
// process as before, and the observation says so (`sandbox: null`): the judge then refuses to allow.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants, existsSync, mkdirSync, readFileSync, readdirSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import type { Problem } from '../../base/problem.js';
import { createRunCgroup, type RunCgroup } from '../cgroup/index.js';
import { doctor, type HostCapabilities } from '../doctor.js';
import { hostOps } from '../ns/hostops.js';
import { launchWithNode } from '../ns/launch.js';
import { buildSeccompFilter, MONTY_WORKER_PROFILE } from '../ns/seccomp.js';
import { mounter, stagingBase } from '../ns/staging.js';
import { mirrorPrefix, reachableByOthers, rootPlan, SANDBOX_GID, SANDBOX_UID, type RootPlan } from '../rootfs.js';
import { ownedTempDir, ownerTag } from '../../base/owner.js';
import { sandboxIds, type HostIdsKind, type RunIds } from '../run-ids.js';

/** How one worker was sandboxed (null in the observation: it was not). */
export interface MontySandboxFacts {
  kind: 'bwrap';
  bwrapVersion: string;
  /** The uid the worker runs as on the host (the sandbox user's when the service is root; else the service's own, mapped inside). */
  hostUid: number;
  /** Whose host ids those were (run-ids.ts). */
  hostIds: HostIdsKind;
  sandboxUid: number;
  seccomp: string;
  network: string;
  filesystem: string;
  cgroup: { version: 1 | 2; memory: boolean; pids: number | null; cpuAccounting: boolean } | null;
}

export interface WorkerSpec {
  workerPath: string;
  /** V8's old-space cap for the worker, in MiB (Monty's heap is capped apart, per run). */
  heapMiB: number;
  /** Size cap of the worker's writable tmpfs (/w): every run's /in and /out live there. */
  stagingBytes: number;
  /** The cgroup's memory limit while the worker idles (each run sets its own: monty-exec.ts). */
  idleMemoryBytes: number;
  /** The cgroup's pids.max (the worker's threads, bwrap's init). */
  pids: number;
}

/** A started worker process, sandboxed or not. */
export interface WorkerProcess {
  readonly stdin: Writable;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Resolves when bwrap (or the plain child) is gone and its pipes are closed. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; error: string | null }>;
  readonly cgroup: RunCgroup | null;
  readonly sandbox: MontySandboxFacts | null;
  /** Why the worker runs without its sandbox (null: it has one). */
  readonly unsandboxedReason: string | null;
  readonly nodeFlags: string[];
  /** The host pid of the node process running the worker script (found once it said it was ready), or null. */
  nodePid(): number | null;
  /** SIGKILL every process of the worker at once. */
  kill(): void;
  /** Keep the service process alive for this worker (busy) or not (idle). */
  ref(on: boolean): void;
  /** After `exited`: remove its cgroup and staging. Never throws. */
  dispose(): Promise<void>;
}

/** The folder holding @pydantic/monty and its platform package (both bound into the sandbox). */
function montyScopeDir(): string {
  const wrapper = createRequire(import.meta.url).resolve('@pydantic/monty');
  return dirname(realpathSync(dirname(wrapper)));
}

/** A path nobody can read through: bound as is, or (root) through a read-only mirror. */
async function reachable(p: string, caps: HostCapabilities): Promise<string> {
  let ok = reachableByOthers(p);
  if (ok) ok = (statSync(p).mode & 0o005) === 0o005;
  if (ok) return p;
  if (!caps.isRoot) return p; // not root: bwrap runs as us, and we can read what we run
  return mirrorPrefix(p, caps);
}

/** The host pid of `ppid`'s first child (bwrap's init has one: the worker). */
function firstChild(ppid: number): number | null {
  try {
    const kids = readFileSync(`/proc/${ppid}/task/${ppid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    if (kids[0] !== undefined) return kids[0];
  } catch {
    /* no CONFIG_PROC_CHILDREN: scan */
  }
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === ppid) return Number(name);
    } catch {
      /* gone */
    }
  }
  return null;
}

/** The ns lane's root without the other interpreters' prefixes (python's, ruby's...): the worker needs node's only. */
function workerRoot(plan: RootPlan, caps: HostCapabilities): string[] {
  const nodePrefix = caps.interpreters.find((i) => i.name === 'node')?.prefix;
  const drop = new Set(plan.prefixes.filter((p) => p.path !== nodePrefix).map((p) => p.path));
  const out: string[] = [];
  for (let i = 0; i < plan.args.length; i++) {
    if (plan.args[i] === '--ro-bind' && drop.has(plan.args[i + 2] ?? '')) i += 2;
    else out.push(plan.args[i]!);
  }
  return out;
}

const nodeFlagsFor = (spec: WorkerSpec): string[] => [`--max-old-space-size=${spec.heapMiB}`, '--no-warnings', '--disallow-code-generation-from-strings'];

/** Starts one worker. Errors are values: a sandbox that cannot be set up is a Problem, never an unsandboxed worker. */
export async function startWorkerProcess(spec: WorkerSpec): Promise<{ ok: true; worker: WorkerProcess } | { ok: false; problem: Problem }> {
  let caps: HostCapabilities;
  try {
    caps = await doctor();
  } catch (e) {
    return { ok: false, problem: { code: 'MONTY_SANDBOX_FAILED', message: `host probe failed: ${(e as Error).message}` } };
  }
  if (caps.blockers.length > 0) return { ok: true, worker: plainWorker(spec, `no sandbox on this host: ${caps.blockers.join('; ')}`) };
  try {
    return { ok: true, worker: await sandboxedWorker(spec, caps) };
  } catch (e) {
    return { ok: false, problem: { code: 'MONTY_SANDBOX_FAILED', message: `cannot set up the Monty worker's sandbox: ${(e as Error).message}` } };
  }
}

/** The worker's package.json ("type": "module") in this process's root-owned staging base, written once. */
let appDir: Promise<string> | null = null;
function workerApp(caps: HostCapabilities, ids: RunIds): Promise<string> {
  appDir ??= (async () => {
    // The same base the ns lane uses (a tmpfs when root), so that whichever lane comes first makes it alike.
    const base = await stagingBase(caps.isRoot ? mounter(caps, hostOps(caps.perlBinary)) : null, caps.isRoot && caps.sandboxHostUser !== null ? ids : null);
    const dir = join(base, 'monty-app');
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    writeFileSync(join(dir, 'package.json'), '{"type":"module"}\n', { mode: 0o644 });
    return dir;
  })().catch((e: unknown) => {
    appDir = null;
    throw e;
  });
  return appDir;
}

async function sandboxedWorker(spec: WorkerSpec, caps: HostCapabilities): Promise<WorkerProcess> {
  const bwrap = caps.bwrap!;
  const asRoot = caps.isRoot && caps.sandboxHostUser !== null;
  const ids = sandboxIds(caps);
  if ('code' in ids) throw new Error(ids.message);
  const { uid, gid } = ids;
  const [plan, app, workerDir, scope] = await Promise.all([rootPlan(caps), workerApp(caps, ids), reachable(dirname(realpathSync(spec.workerPath)), caps), reachable(montyScopeDir(), caps)]).catch((e: unknown) => {
    ids.release();
    throw e;
  });
  const node = realpathSync(process.execPath);
  accessSync(node, constants.X_OK);

  // The worker's cgroup is marked in the staging base, so that this process's exit and the orphan
  // sweep (ns/sweep.ts) remove it as they remove an ns run's.
  const name = `monty-w-${ownerTag()}-${randomBytes(4).toString('hex')}`;
  let cg: RunCgroup | null = null;
  let marker: string | null = null;
  if (caps.cgroup.usable) {
    try {
      marker = join(dirname(app), name);
      mkdirSync(marker, { mode: 0o700 });
      cg = createRunCgroup(caps.cgroup, name, { memoryBytes: spec.idleMemoryBytes, pids: spec.pids }, { holdFiles: true });
    } catch (e) {
      ids.release(); // nothing runs as it yet
      throw e;
    }
  }
  const a: string[] = ['--unshare-user', '--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try', '--die-with-parent', '--new-session', '--cap-drop', 'ALL', '--uid', String(SANDBOX_UID), '--gid', String(SANDBOX_GID), '--hostname', 'airlock'];
  if (bwrap.supports.disableUserns) a.push('--disable-userns');
  a.push(...workerRoot(plan, caps));
  a.push('--ro-bind', join(app, 'package.json'), '/airlock/package.json', '--ro-bind', workerDir, '/airlock/lanes', '--ro-bind', scope, '/airlock/node_modules/@pydantic');
  if (caps.tmpfsSizeCaps.sandboxTmp) a.push('--size', String(spec.stagingBytes));
  a.push('--tmpfs', '/w', '--remount-ro', '/dev', '--remount-ro', '/', '--clearenv', '--chdir', '/');
  const nodeFlags = nodeFlagsFor(spec);
  a.push('--info-fd', '3', '--block-fd', '4', '--seccomp', '5', '--', node, ...nodeFlags, `/airlock/lanes/${basename(spec.workerPath)}`, '/w');

  const ops = hostOps(caps.perlBinary);
  const launch = launchWithNode({
    cmd: [bwrap.path, ...a],
    ids: asRoot ? { uid, gid } : null,
    filter: buildSeccompFilter(process.arch, { profile: 'monty-worker' }),
    stdin: true,
    prepare: async (pid) => {
      try {
        cg?.addProcess(pid);
      } catch (e) {
        return `cannot move the worker into its cgroup: ${(e as Error).message}`;
      }
      // RLIMIT_CORE=0 (no core of a crashed worker reaches the host's dump handler); the CPU limit is per run, by the host.
      const err = ops ? await ops.setRlimits(pid, uid, gid, 1e9, 1e9, null) : null;
      if (err !== null) return `cannot set the worker's rlimits: ${err}`;
      const sealErr = ops ? await ops.sealDevices(pid) : null;
      return sealErr === null ? null : `cannot make the host's device nodes in the worker's /dev read-only: ${sealErr}`;
    },
  });
  let initPid: number | null = null;
  let nodePid: number | null = null;
  let setupError: string | null = null;
  void launch.ready.then((r) => {
    if ('error' in r) {
      setupError = r.error;
      initPid = r.initPid;
      kill();
      return;
    }
    initPid = r.initPid;
    launch.release();
  });
  const kill = (): void => {
    if (initPid !== null) {
      try {
        // The init of the worker's pid namespace: every process in it dies with it.
        process.kill(initPid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    launch.kill();
  };
  const exited = launch.closed.then((e) => ({ code: e.code, signal: e.signal, error: e.spawnError ?? setupError }));
  const facts: MontySandboxFacts = {
    kind: 'bwrap',
    bwrapVersion: bwrap.version,
    hostUid: uid,
    hostIds: ids.kind,
    sandboxUid: SANDBOX_UID,
    seccomp: MONTY_WORKER_PROFILE.summary,
    network: 'none: an empty network namespace of its own',
    filesystem: `read-only root (/usr, a generated /etc, node, the worker's folder and @pydantic); writable: /w, a tmpfs${caps.tmpfsSizeCaps.sandboxTmp ? ` of ${spec.stagingBytes} bytes` : ''} holding the runs' /in and /out`,
    cgroup: cg ? { version: cg.version, memory: cg.enforces.memory, pids: cg.enforces.pids ? spec.pids : null, cpuAccounting: cg.enforces.cpuAccounting } : null,
  };
  return {
    stdin: launch.stdin!,
    stdout: launch.stdout,
    stderr: launch.stderr,
    exited,
    cgroup: cg,
    sandbox: facts,
    unsandboxedReason: null,
    nodeFlags,
    nodePid: () => (nodePid ??= initPid !== null ? firstChild(initPid) : null),
    kill,
    ref: (on) => launch.ref(on),
    async dispose() {
      const errors = cg ? await cg.destroy() : [];
      if (errors.length === 0 && marker) rmSync(marker, { recursive: true, force: true });
      // Called once it exited (monty-pool.ts): with its group gone, nothing runs as its uid, and its /w
      // was a tmpfs of its own, so no file of it is left either.
      if (errors.length === 0) ids.release();
    },
  };
}

function plainWorker(spec: WorkerSpec, reason: string): WorkerProcess {
  const staging = ownedTempDir('monty-w');
  const nodeFlags = nodeFlagsFor(spec);
  // No inherited environment: nothing of the service's (tokens, NODE_OPTIONS) reaches the worker.
  const child = spawn(process.execPath, [...nodeFlags, spec.workerPath, staging], { stdio: ['pipe', 'pipe', 'pipe'], env: {}, cwd: '/' });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; error: string | null }>((resolve) => {
    child.on('error', (e) => resolve({ code: null, signal: null, error: `cannot start the Monty worker: ${e.message}` }));
    child.on('close', (code, signal) => resolve({ code, signal, error: null }));
  });
  return {
    stdin: child.stdin,
    stdout: child.stdout,
    stderr: child.stderr,
    exited,
    cgroup: null,
    sandbox: null,
    unsandboxedReason: reason,
    nodeFlags,
    nodePid: () => child.pid ?? null,
    kill: () => void child.kill('SIGKILL'),
    ref: (on) => {
      for (const s of [child, child.stdin, child.stdout, child.stderr] as unknown as { ref?: () => void; unref?: () => void; destroyed?: boolean }[]) if (s && !s.destroyed) (on ? s.ref : s.unref)?.call(s);
    },
    async dispose() {
      if (existsSync(staging)) rmSync(staging, { recursive: true, force: true });
    },
  };
}
