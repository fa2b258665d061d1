// The `ns` lane runner: one program, run once in bubblewrap, measured from the host.
//
// Process chain (root host):  airlock-tracer ─ bwrap(A) ─ bwrap init(B, pid 1) ─ program
//   * The host tracer (observe/tracer.ts, native/tracer.c) starts bwrap (ns/launch.ts): already in the
//     run's cgroups, under its rlimits, as the sandbox's host user (sandbox-user.ts: airlock-sandbox,
//     else nobody) with no other fd of ours, so an escape from the namespaces lands as that user. bwrap --info-fd tells the tracer B's host pid while
//     --block-fd holds B before it forks the program; the tracer attaches to B and lets it go (for a
//     run with the network, once we have bridged B's network namespace). Every process of the program
//     is forked from B afterwards: in the group, under the rlimits, traced from birth.
//   * Run by an ordinary user, the same chain as that user (no uid of its own for the sandbox); where no
//     cgroup counts memory or processes, the tracer sets RLIMIT_AS on bwrap and RLIMIT_NPROC on B.
//   * Fallbacks, when the tracer is not built or the host refuses its attach: node spawns bwrap (behind
//     `strace -f -u <sandbox user>` when strace is there; its log is root-owned, out of the sandbox's reach),
//     moves B into the cgroup and sets its rlimits with the perl host helper (hostops.ts) or, without
//     perl, by `prlimit` exec'd first in the chain.
//   * our seccomp filter travels on fd 5 (--seccomp): a file in the staging base for the tracer (root-owned as root), a pipe for node.
//   * The result is returned as soon as every sandbox process is dead and /out is copied; removing the
//     cgroup, unmounting and deleting the staging dir run after it, tracked: `sandboxIdle()` waits.
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { isAbsolute, join, normalize } from 'node:path';
import type { Problem } from '../../base/problem.js';
import { createRunCgroup, type RunCgroup } from '../cgroup/index.js';
import { doctor, RLIMIT_BACKSTOP, type HostCapabilities } from '../doctor.js';
import { diffSnapshots, DiffBudget, DiffBudgetExceeded, OBSERVE_MARGIN_MS, snapshotTree } from '../observe/fs-diff.js';
import { refusedFileAccess } from '../observe/file-access.js';
import { parseStraceLog, straceArgv } from '../observe/strace.js';
import { withoutProbes } from '../observe/probes.js';
import { sideEffectsFromTrace } from '../observe/trace-events.js';
import { syscallTracer } from '../observe/tracer.js';
import { resolveOnRoot, rootPlan, SANDBOX_UID } from '../rootfs.js';
import type { FsChange, LimitEnforcement, LimitName, RunExit, HostFacts, Limits, Resources, Observation, NsRunSpec, RunStatus, ObservedSideEffects, ScopeObservation } from '../types.js';
import { StreamCapture } from './capture.js';
import { baseEnv, checkSpecEnv } from './env.js';
import { endUnused, refillHeldLaunchers, takeHeldLauncher } from './held.js';
import { hostOps } from './hostops.js';
import { launchWithNode, launchWithTracer, rlimitBackstops, type SandboxLaunch } from './launch.js';
import { namespaceArgs, observeFilterIn, plainSeccompFilter, READ_ONLY_ROOT } from './bwrap-args.js';
import { dropPoolShapes, LAUNCHER_IN_SANDBOX, poolHas, poolShape, refillPool, takePooled } from './pool.js';
import { folderArgs, makeRunFolders, removeRunFolders, runFolders } from './run-folders.js';
import { describeGrant } from '../../base/allowlist.js';
import { bridgePairs, PROXY_HOST, PROXY_PORT, startForwarder, type Forwarder } from '../egress/forwarder.js';
import { NetworkProxy } from '../egress/proxy.js';
import type { NetworkObservation } from '../egress/records.js';
import { closeScopes, fileCopyOf, idmapRefusalHolds, mountScopeOverlay, observeScope, openScopes, stageFileCopy, type StagedScope } from './scopes.js';
import { copyTreeNoFollow, makeOutDir, observeScratch, outDirProblem, tmpfsFull } from './outputs.js';
import { chownTo, mkdirMode, mounter, stageInput, stagingBase } from './staging.js';
import { ownerTag } from '../../base/owner.js';
import { sandboxIds, type RunIds } from '../run-ids.js';

const INPUT_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
/** Paths a scope may not cover: the sandbox's own mounts and the read-only system root. */
const RESERVED = ['/', '/in', '/out', '/tmp', '/proc', '/dev', '/usr', '/etc', '/bin', '/sbin', '/lib', '/lib64', '/lib32', '/libx32'];
const LIMIT_NAMES: LimitName[] = ['wallMs', 'cpuMs', 'memoryBytes', 'pids', 'outBytes', 'tmpBytes', 'files', 'stdoutBytes', 'stderrBytes'];
/** How often the host polls the cgroup for CPU time, OOM kills and pids-limit hits. */
const POLL_MS = 10;

/** How long the tracer may take to report a run's end after its last process died. */
const TRACE_SETTLE_MS = 2000;

/** Cleanups still running (cgroup removal, unmounts, staging removal), started after results were returned. */
const pendingCleanups = new Set<Promise<void>>();

/**
 * Resolves when every cleanup of the runs started so far is done (loops: a run finishing meanwhile adds
 * its own). Await it before asserting that nothing is left behind, and before process.exit().
 */
export async function sandboxIdle(): Promise<void> {
  while (pendingCleanups.size > 0) await Promise.all([...pendingCleanups]);
}

/** Whether a killed sandbox's processes are all gone within 5 s (else its uid stays claimed, for the orphan sweep to check). */
const ended = (l: SandboxLaunch): Promise<boolean> =>
  Promise.race([l.closed.then(() => true), new Promise<boolean>((r) => setTimeout(r, 5000, false).unref())]);

function background(task: () => Promise<void>): void {
  // Starts in the next check phase, so the run's result goes up the pipeline first (measured: the
  // cgroup removal's reads and rmdirs, ~0.3 ms, had run between a result and the caller's next step).
  const p: Promise<void> = new Promise<void>((r) => setImmediate(r))
    .then(task)
    .catch((e: Error) => process.emitWarning(`airlock ns cleanup failed: ${e.message}`))
    .finally(() => pendingCleanups.delete(p));
  pendingCleanups.add(p);
}

export function validateSpec(spec: NsRunSpec): Problem[] {
  const p: Problem[] = [];
  if (!Array.isArray(spec.argv) || spec.argv.length === 0 || typeof spec.argv[0] !== 'string' || spec.argv[0] === '') p.push({ code: 'NS_ARGV_EMPTY', message: 'argv must hold at least the program to run', path: 'argv' });
  else if (spec.argv.some((a) => typeof a !== 'string' || a.includes('\0'))) p.push({ code: 'NS_ARGV_INVALID', message: 'every argv element must be a string without NUL', path: 'argv' });
  if (spec.cwd !== undefined && (!isAbsolute(spec.cwd) || normalize(spec.cwd) !== spec.cwd)) p.push({ code: 'NS_CWD_INVALID', message: `cwd must be an absolute normalized path inside the sandbox (got "${String(spec.cwd).slice(0, 100)}")`, path: 'cwd' });
  p.push(...checkSpecEnv(spec.env));
  const names = new Set<string>();
  (spec.inputs ?? []).forEach((inp, i) => {
    if (!INPUT_NAME.test(inp.name ?? '')) p.push({ code: 'NS_INPUT_NAME', message: `input name "${String(inp.name).slice(0, 100)}" must match [A-Za-z0-9_][A-Za-z0-9._-]* (no slash, no leading dot)`, path: `inputs[${i}].name` });
    else if (names.has(inp.name)) p.push({ code: 'NS_INPUT_DUPLICATE', message: `input name "${inp.name}" is used twice: /in holds one file per name`, path: `inputs[${i}].name` });
    names.add(inp.name);
    if (typeof inp.hostPath !== 'string' || !isAbsolute(inp.hostPath)) p.push({ code: 'NS_INPUT_PATH', message: 'input hostPath must be an absolute host path', path: `inputs[${i}].hostPath` });
  });
  (spec.scopes ?? []).forEach((s, i) => {
    const hp = s.hostPath;
    if (typeof hp !== 'string' || !isAbsolute(hp) || normalize(hp) !== hp || hp.endsWith('/')) {
      p.push({ code: 'NS_SCOPE_PATH', message: 'scope hostPath must be an absolute normalized path without a trailing slash', path: `scopes[${i}].hostPath` });
      return;
    }
    if (RESERVED.some((r) => hp === r || (r !== '/' && hp.startsWith(`${r}/`)))) p.push({ code: 'NS_SCOPE_RESERVED', message: `scope ${hp} overlaps the sandbox's own mounts or its read-only system root: declare a path outside ${RESERVED.join(', ')}`, path: `scopes[${i}].hostPath` });
    (spec.scopes ?? []).forEach((o, j) => {
      if (j > i && (o.hostPath === hp || o.hostPath.startsWith(`${hp}/`) || hp.startsWith(`${o.hostPath}/`))) p.push({ code: 'NS_SCOPE_OVERLAP', message: `scopes ${hp} and ${o.hostPath} overlap: declare the outer one only`, path: `scopes[${j}].hostPath` });
    });
  });
  if (typeof spec.outDir !== 'string' || !isAbsolute(spec.outDir)) p.push({ code: 'NS_OUTDIR', message: 'outDir must be an absolute host path', path: 'outDir' });
  for (const k of LIMIT_NAMES) {
    const v = spec.limits?.[k];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) p.push({ code: 'NS_LIMIT_INVALID', message: `limits.${k} must be a positive integer (got ${String(v).slice(0, 40)})`, path: `limits.${k}` });
  }
  if (spec.network !== undefined) p.push(...checkNetworkSpec(spec));
  if (spec.limits && spec.limits.pids < 2) p.push({ code: 'NS_LIMIT_INVALID', message: 'limits.pids must be at least 2 (the sandbox init and the program)', path: 'limits.pids' });
  return p;
}

const emptyStream = (): StreamCapture => new StreamCapture(0);

/** The proxy variables the runner sets when the run has the network (callers cannot set them). */
export const PROXY_ENV_NAMES = ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'NO_PROXY', 'http_proxy', 'https_proxy', 'all_proxy', 'no_proxy'] as const;

function proxyEnv(): Record<string, string> {
  const url = `http://${PROXY_HOST}:${PROXY_PORT}`;
  const env: Record<string, string> = {};
  for (const k of PROXY_ENV_NAMES) env[k] = /no_proxy/i.test(k) ? '' : url;
  return env;
}

function checkNetworkSpec(spec: NsRunSpec): Problem[] {
  const p: Problem[] = [];
  const n = spec.network!;
  if (!n || typeof n !== 'object' || !Array.isArray(n.grant?.rules) || !Array.isArray(n.grant?.addressRules)) return [{ code: 'NS_NETWORK_SPEC', message: 'network must carry a grant (rules, addressRules) from networkGrant()', path: 'network' }];
  for (const k of ['bytesOut', 'bytesIn', 'connections'] as const) {
    const v = n.caps?.[k];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) p.push({ code: 'NS_NETWORK_SPEC', message: `network.caps.${k} must be a positive integer (got ${String(v).slice(0, 40)})`, path: `network.caps.${k}` });
  }
  for (const k of Object.keys(spec.env ?? {})) {
    if ((PROXY_ENV_NAMES as readonly string[]).includes(k)) p.push({ code: 'NS_ENV_RESERVED', message: `${k} is set by the sandbox runner when the run has the network and cannot be overridden: remove it`, path: `env.${k}` });
  }
  return p;
}

function hostFacts(caps: HostCapabilities, ids: RunIds | null, spec: NsRunSpec | null, cg: RunCgroup | null, syscallTracer: HostFacts['syscallTracer'], backstops: ('memoryBytes' | 'pids')[] = []): Observation['host'] {
  const cgName = `cgroup v${cg?.version}${caps.cgroup.delegation?.kind === 'delegated' ? ' (delegated to this user)' : ''}`;
  // Without the cgroup controller, say so, what lifts it, and which rlimit stood in (weaker: per process).
  const noGroup = (controller: string, rlimit: string | null): string =>
    [`no ${controller} cgroup controller${caps.cgroup.fix ? ` (${caps.cgroup.detail}; fix: ${caps.cgroup.fix})` : ''}`, rlimit ? `only ${rlimit} was set, as a backstop weaker than a cgroup` : null].filter(Boolean).join('; ');
  const limits: LimitEnforcement[] = LIMIT_NAMES.map((limit) => {
    switch (limit) {
      case 'wallMs':
        return { limit, enforcedBy: 'host timer + kill of the cgroup / pid namespace' };
      case 'cpuMs': {
        const by = [cg?.enforces.cpuAccounting ? `${cgName} CPU accounting polled every ${POLL_MS} ms` : null, caps.prlimitBinary || caps.perlBinary ? 'RLIMIT_CPU (whole seconds, per process)' : null].filter(Boolean).join(' + ');
        return by ? { limit, enforcedBy: by } : { limit, enforcedBy: null, reportedOnlyReason: 'no cgroup CPU accounting and no prlimit' };
      }
      case 'memoryBytes':
        return cg?.enforces.memory ? { limit, enforcedBy: `${cgName} memory limit` } : { limit, enforcedBy: null, reportedOnlyReason: noGroup('memory', backstops.includes('memoryBytes') ? RLIMIT_BACKSTOP.memoryBytes : null) };
      case 'pids':
        return cg?.enforces.pids ? { limit, enforcedBy: `${cgName} pids limit` } : { limit, enforcedBy: null, reportedOnlyReason: noGroup('pids', backstops.includes('pids') ? RLIMIT_BACKSTOP.pids : null) };
      case 'outBytes':
        return caps.tmpfsSizeCaps.hostOut
          ? { limit, enforcedBy: 'size-capped tmpfs holding /out and the scope overlays\' upper dirs (one-file scopes: post-check of the total)' }
          : { limit, enforcedBy: 'RLIMIT_FSIZE per file + post-check of the total' };
      case 'tmpBytes':
        if (caps.tmpfsSizeCaps.hostOut) return { limit, enforcedBy: 'size-capped tmpfs holding /tmp and /dev/shm' };
        return caps.tmpfsSizeCaps.sandboxTmp ? { limit, enforcedBy: 'bwrap --size tmpfs on /tmp and another on /dev/shm' } : { limit, enforcedBy: null, reportedOnlyReason: 'bwrap has no --size' };
      case 'files':
        return caps.tmpfsSizeCaps.hostOut
          ? { limit, enforcedBy: 'nr_inodes of the tmpfs holding /out and the scope overlays, and of the one holding /tmp and /dev/shm; the host diff stops past it' }
          : { limit, enforcedBy: 'post-check: the host diff of /out and the scopes stops past the cap (not prevented)' };
      default:
        return { limit, enforcedBy: 'host capture cap (kept bytes; the rest counted and hashed)' };
    }
  });
  void spec;
  return {
    bwrapVersion: caps.bwrap?.version ?? 'none',
    cgroupVersion: cg?.version ?? null,
    hostUid: ids?.uid ?? -1,
    hostIds: ids?.kind ?? 'caller',
    ...(ids?.why ? { hostIdsWhy: ids.why } : {}),
    sandboxUid: SANDBOX_UID,
    seccomp: caps.seccomp.available,
    syscallTracer,
    outMechanism: caps.tmpfsSizeCaps.hostOut ? 'tmpfs-size' : 'rlimit-fsize+post-check',
    limits,
  };
}

function nullResources(reason: string): Resources {
  const r: Resources = { cpuUserMs: null, cpuSystemMs: null, peakMemoryBytes: null, diskWriteBytes: null, networkBytesIn: null, networkBytesOut: null, wallMs: null, unmeasured: {}, basis: {} };
  for (const k of ['cpuUserMs', 'cpuSystemMs', 'peakMemoryBytes', 'diskWriteBytes', 'networkBytesIn', 'networkBytesOut', 'wallMs'] as const) r.unmeasured[k] = reason;
  return r;
}

function errorObservation(runId: string, caps: HostCapabilities | null, problems: Problem[], started = new Date()): Observation {
  const now = new Date();
  return {
    runId,
    startedAt: started.toISOString(),
    endedAt: now.toISOString(),
    wallMs: now.getTime() - started.getTime(),
    exit: { code: null, signal: null, source: 'none' },
    status: 'SANDBOX_ERROR',
    reason: problems.map((p) => p.message).join('; '),
    limitsExceeded: [],
    stdout: emptyStream().result(),
    stderr: emptyStream().result(),
    resources: nullResources('the program did not run'),
    sideEffects: null,
    sideEffectsUnavailable: 'the program did not run',
    fs: { out: null, outError: 'the program did not run', scopes: [] },
    inputs: [],
    host: caps ? hostFacts(caps, null, null, null, null) : { bwrapVersion: 'unknown', cgroupVersion: null, hostUid: -1, hostIds: 'caller', sandboxUid: SANDBOX_UID, seccomp: false, syscallTracer: null, outMechanism: 'rlimit-fsize+post-check', limits: [] },
    problems,
  };
}

/** The program's own end as strace saw it (the first process bwrap's init started). */
export function programEndFromStrace(log: string, programPid: number | null): { code: number | null; signal: string | null } | null {
  if (programPid === null) return null;
  const re = new RegExp(`^${programPid}\\s+(?:\\d\\d:\\d\\d:\\S+\\s+)?\\+\\+\\+ (?:killed by (SIG[A-Z0-9]+)|exited with (\\d+)) `, 'm');
  const m = re.exec(log);
  if (!m) return null;
  return m[1] ? { code: null, signal: m[1] } : { code: Number(m[2]), signal: null };
}

/** errno texts of an exec that found no program (127) or one it may not run (126), as a shell sorts them. */
const EXEC_ERRORS: Record<string, number> = { 'No such file or directory': 127, 'Not a directory': 127, 'Permission denied': 126, 'Exec format error': 126, 'Is a directory': 126 };

/**
 * The launcher's word that it could not execute `program` (bwrap's `execvp`, or airlock-exec's in a
 * sandbox started ahead of need), with the exit status a shell gives, or null for any other failure.
 * Only bwrap's or airlock-exec's own stderr reaches here: no program of the run had started.
 */
export function programNotExecuted(stderr: string, program: string, pooled: boolean): { code: number; reason: string } | null {
  const head = pooled ? `airlock-exec: ${program}: ` : `bwrap: execvp ${program}: `;
  const line = stderr.split('\n').find((l) => l.startsWith(head));
  const why = line?.slice(head.length);
  const code = why === undefined ? undefined : EXEC_ERRORS[why];
  if (code === undefined) return null;
  return { code, reason: `${program.slice(0, 200)} could not be executed in the sandbox (${why}): exited with ${code}, as a shell does for a command ${code === 127 ? 'not found' : 'it may not run'}` };
}

const SIGNALS: Record<number, string> = { 1: 'SIGHUP', 2: 'SIGINT', 3: 'SIGQUIT', 4: 'SIGILL', 5: 'SIGTRAP', 6: 'SIGABRT', 7: 'SIGBUS', 8: 'SIGFPE', 9: 'SIGKILL', 10: 'SIGUSR1', 11: 'SIGSEGV', 12: 'SIGUSR2', 13: 'SIGPIPE', 14: 'SIGALRM', 15: 'SIGTERM', 24: 'SIGXCPU', 25: 'SIGXFSZ', 31: 'SIGSYS' };

interface Kill {
  status: RunStatus;
  limit: LimitName | null;
  reason: string;
}

// Why a run that may write a scope keeps the sandbox user's uid: this host cannot make idmapped
// mounts at all, or a scope's filesystem refused one (remembered by path for this process's life).
const idmapRefusals: { host: string | null; scopes: Map<string, string> } = { host: null, scopes: new Map() };

function idmapRefused(scopePaths: string[]): string | undefined {
  return idmapRefusals.host ?? scopePaths.map((p) => idmapRefusals.scopes.get(p)).find((why) => why !== undefined);
}

function rememberIdmapRefused(p: Problem): void {
  // Never by the message's text: it holds the scope's path, which the scope's owner names. A refusal
  // that may pass (the helper stopped, ENOMEM) is not remembered: the next run tries again.
  const holds = idmapRefusalHolds(p);
  if (holds === 'host') idmapRefusals.host = p.message;
  else if (holds === 'scope' && p.path) idmapRefusals.scopes.set(p.path, p.message);
  else return;
  // Sandboxes waiting for such writers would never be taken again (their runs start their own):
  // as idmapRefused, a writer shape falls back when any of its scopes was refused, one it only
  // reads included (each directory scope of a writer is idmapped).
  dropPoolShapes((sp) => sp.scopes.some((sc) => !sc.readOnly) && (holds === 'host' || sp.scopes.some((sc) => sc.hostPath === p.path)));
}

/** Run one program in the ns sandbox and observe it. Never throws: failures are SANDBOX_ERROR observations. */
export async function runNs(spec: NsRunSpec): Promise<Observation> {
  // The owner in the name: the run's folder and cgroup say whose they are (a sweep's only clue after a crash).
  const runId = `ns-${ownerTag()}-${randomBytes(4).toString('hex')}`;
  let caps: HostCapabilities;
  try {
    caps = await doctor();
  } catch (e) {
    return errorObservation(runId, null, [{ code: 'NS_HOST_PROBE_FAILED', message: `host probe failed: ${(e as Error).message}` }]);
  }
  if (caps.blockers.length) return errorObservation(runId, caps, caps.blockers.map((b) => ({ code: 'NS_HOST_UNSUPPORTED', message: b })));
  const problems = validateSpec(spec);
  if (problems.length) return errorObservation(runId, caps, problems);
  try {
    const first = await execute(runId, spec, caps);
    // The host refused the tracer's ptrace attach before anything of the program ran (bwrap's init was
    // still blocked): the tracer is now off for this process, so run it again, observed by strace.
    const run = first.problems.some((p) => p.code === 'NS_TRACER_REFUSED') ? await execute(`${runId}-strace`, spec, caps) : first;
    // A scope could not be seen through an idmapped mount (nothing ran): again, with the sandbox user's uid.
    const idmap = run.problems.filter((p) => p.code === 'NS_SCOPE_IDMAP');
    if (idmap.length === 0) return run;
    for (const p of idmap) rememberIdmapRefused(p);
    return await execute(`${runId}-ids`, spec, caps, idmap.map((p) => p.message).join('; '));
  } catch (e) {
    const code = (e as { code?: unknown }).code === 'NS_TMPDIR_UNREACHABLE' ? 'NS_TMPDIR_UNREACHABLE' : 'NS_SETUP_FAILED';
    return errorObservation(runId, caps, [{ code, message: `sandbox set-up failed: ${(e as Error).message}` }]);
  }
}

/** `sandboxUidBecause`: a run that may write a scope keeps the sandbox user's uid, for that reason. */
async function execute(runId: string, spec: NsRunSpec, caps: HostCapabilities, sandboxUidBecause?: string): Promise<Observation> {
  const bwrap = caps.bwrap!;
  const limits: Limits = spec.limits;
  const asRoot = caps.isRoot && caps.sandboxHostUser !== null;
  // Syscall observation: the persistent host tracer (built binary; as root, with a sandbox user to run
  // bwrap as), else strace, else none.
  const wantTrace = spec.traceSyscalls ?? true;
  const tracer = wantTrace && (asRoot || !caps.isRoot) ? syscallTracer() : null;
  const useStrace = wantTrace && tracer === null && caps.strace !== null;
  const observedBy: HostFacts['syscallTracer'] = tracer ? 'airlock-tracer' : useStrace ? 'strace' : null;
  const scopes = spec.scopes ?? [];
  const tStart = performance.now();
  let tReleased = 0;
  spec.onEvent?.({ kind: 'phase', phase: 'staging' });
  // As root, the host's overlay is mounted from the scope agent's descriptor of the scope root;
  // bwrap's --overlay-src takes a path, resolved again (following links) when bwrap starts, after the
  // agent opened it: the scope's owner could swap a component in between. bwrap's overlay only when
  // the host's cannot be had (not root: then every path is resolved with Airlock's own authority).
  const hostOverlay = caps.isRoot && caps.overlayfs && caps.mountBinary !== null;
  const useBwrapOverlay = bwrap.supports.overlay && !hostOverlay;
  if (scopes.length && !useBwrapOverlay && !hostOverlay) {
    return errorObservation(runId, caps, [{ code: 'NS_OVERLAY_UNAVAILABLE', message: `declared scopes need a copy-on-write overlay: bwrap ${bwrap.version} has no --overlay and host overlayfs needs root and the overlay filesystem; nothing ran, the real files were not touched` }]);
  }
  if (spec.network && (!asRoot || !caps.perlBinary)) {
    return errorObservation(runId, caps, [{ code: 'NS_NETWORK_UNAVAILABLE', message: `the run asks for the network, which needs ${!asRoot ? 'root (the bridge joins the sandbox\'s network namespace)' : 'perl (the bridge into the sandbox\'s network namespace)'}: nothing ran; without the bridge the sandbox has no network at all` }]);
  }
  const plan = await rootPlan(caps);
  let program = spec.argv[0]!;
  if (!program.startsWith('/')) {
    const found = resolveOnRoot(program, plan.path);
    if (!found) return errorObservation(runId, caps, [{ code: 'NS_ARGV_NOT_FOUND', message: `"${program.slice(0, 100)}" is not on the sandbox PATH (${plan.path.join(':')}): use an absolute path or an installed interpreter` }]);
    program = found;
  }

  // ---- staging (everything below is undone in `finally`) ----
  const ops = hostOps(caps.perlBinary);
  const mnt = mounter(caps, ops);
  // Every scope through its agent, while the run's tmpfs are mounted: a link on the way refuses the
  // run before anything is staged in a scope.
  const openingScopes = openScopes(scopes.map((sc) => sc.hostPath));
  openingScopes.catch(() => undefined); // awaited below, or closed in `finally`: never unhandled
  // A sandbox started ahead of need (pool.ts) has its folders, tmpfs, cgroup and bwrap ready (and
  // each directory scope's mount point), its first program waiting for the command: what is left is
  // the scopes' overlays, from their agents opened now, the inputs and the command.
  const writesScope = scopes.some((sc) => sc.readOnly !== true);
  // A run that may write a scope has a uid of its own and sees the sandbox user's files there as its
  // own (idmapped lower dirs), unless this host or a scope's filesystem cannot: then the sandbox user's.
  const bwrapOverlayOnly = useBwrapOverlay ? 'the host\'s overlayfs cannot be used here, and bwrap\'s overlay takes no idmapped lower dir' : undefined;
  const keepSandboxUid = writesScope ? (sandboxUidBecause ?? bwrapOverlayOnly ?? idmapRefused(scopes.map((sc) => sc.hostPath))) : undefined;
  const shape = tracer && asRoot && (scopes.length === 0 || hostOverlay) && keepSandboxUid === undefined ? poolShape(spec) : null;
  const scopesAreDirs = async (): Promise<boolean> => {
    const o = await openingScopes;
    return o.ok && o.scopes.every((sc) => sc.kind === 'dir');
  };
  const pooled = shape && poolHas(shape) && (scopes.length === 0 || (await scopesAreDirs())) ? takePooled(shape, plan) : null;
  // The host ids the sandbox runs as: its own, or (strace names its user) the sandbox user's.
  const ids = pooled?.ids ?? sandboxIds(caps, { shared: useStrace, ...(keepSandboxUid !== undefined ? { sandboxUid: keepSandboxUid } : {}), hasScope: scopes.length > 0 });
  if ('code' in ids) {
    openingScopes.then((o) => o.ok && closeScopes(o.scopes), () => undefined);
    return errorObservation(runId, caps, [ids]);
  }
  const { uid, gid } = ids;
  const idmap = writesScope && ids.kind === 'own' && caps.sandboxHostUser ? { from: caps.sandboxHostUser.uid, to: uid } : undefined;
  const base = pooled
    ? null
    : await stagingBase(caps.isRoot ? mnt : null, asRoot ? ids : null).catch((e: unknown) => {
        openingScopes.then((o) => o.ok && closeScopes(o.scopes), () => undefined); // the `finally` below is not reached
        ids.release();
        throw e;
      });
  // Started on request by a service: the launcher held ahead of need, already in its cgroup (held.ts).
  const held = pooled || !tracer || !asRoot ? null : takeHeldLauncher(tracer, caps.cgroup, { memoryBytes: limits.memoryBytes, pids: limits.pids + 1 });
  const folders = pooled?.folders ?? runFolders(base!, held?.name ?? runId, caps);
  const { dir, inStage, outStage, sharedDisk, scratch, mounted } = folders;
  const logFile = join(dir, 'strace.log');
  let cg: RunCgroup | null = pooled?.cg ?? held?.cg ?? null;
  let heldUsed = false;
  const cleanupErrors: string[] = [];
  // Network: the host proxy of this run (unix socket in the root-owned staging dir) and the bridge
  // that carries 127.0.0.1:PROXY_PORT inside the sandbox's own network namespace to it.
  let proxy: NetworkProxy | null = null;
  let forwarder: Forwarder | null = null;
  let onNetworkCap: ((message: string) => void) | null = null;
  let runOver = false;
  let sandboxGone = false;
  let launched: SandboxLaunch | null = pooled?.launch ?? null;
  const proxySocket = join(dir, 'proxy.sock');
  try {
    // Every place the program can write is a capped tmpfs of this run (when root), in bytes and in
    // entries (nr_inodes): /out with the directory scopes' overlay upper dirs under the disk limit
    // (a one-file scope's copy is post-checked), and /tmp with /dev/shm under the /tmp limit.
    const outP = pooled ? Promise.resolve() : makeRunFolders(folders, mnt, limits, { uid, gid }, asRoot);
    // The folder that holds outDir, made by the caller while the sandbox starts; outDir itself is
    // made after the run, and only when /out holds something.
    const parentReady = Promise.resolve(spec.outDirParent);
    parentReady.catch(() => undefined); // awaited before the launch, below
    const inputsP = Promise.all((spec.inputs ?? []).map(async (i) => ({ name: i.name, ...(await stageInput(i.hostPath, join(inStage, i.name))) })));
    inputsP.catch(() => undefined); // awaited below, unless the run is refused before (never unhandled: that ends a service)
    // While the mounts and the agents work. Through the tracer, bwrap itself is born in the group
    // too: one more process than the sandbox's own.
    if (!pooled && !held && caps.cgroup.usable) cg = createRunCgroup(caps.cgroup, runId, { memoryBytes: limits.memoryBytes, pids: limits.pids + (tracer ? 1 : 0) });
    const openedScopes = await openingScopes;
    if (!openedScopes.ok) {
      await outP.catch(() => undefined); // its mounts are undone below
      return errorObservation(runId, caps, openedScopes.problems);
    }
    const scopeDirs: StagedScope[] = openedScopes.scopes.map((s, i) => {
      if (pooled) return { ...s, ...pooled.scopes[i]! };
      // A directory's writes land in its overlay's upper dir, on the capped tmpfs; a file's copy stays
      // in staging (copying it is not the run's writing; what the run adds to it is post-checked).
      const rw = join(s.kind === 'dir' && sharedDisk ? sharedDisk : dir, `scope${i}`);
      return { ...s, upper: join(rw, 'upper'), work: join(rw, 'work'), merged: join(dir, `scope${i}`, 'merged') };
    });
    await outP; // the scope dirs go on the shared tmpfs
    const scopesP = Promise.all(
      scopeDirs.map(async (s, i): Promise<Problem | null> => {
        // A pooled sandbox has bound the mount point, shared: the overlay mounted on it now reaches
        // the waiting sandbox (read-only in itself for a read-only scope, as the sandbox's bind of it
        // was made before and does not cover what arrives on top).
        if (pooled) return mountScopeOverlay(mnt, s, mounted, scopes[i]?.readOnly === true, idmap);
        await mkdirMode(join(s.upper, '..'), 0o711);
        if (join(s.merged, '..') !== join(s.upper, '..')) await mkdirMode(join(s.merged, '..'), 0o711);
        if (s.kind === 'file') {
          // One file: the sandbox sees a copy bound over it (overlayfs works on directories only), so
          // the real file never changes; deleting or renaming the bound path fails (EBUSY).
          await mkdirMode(s.upper, 0o755);
          return stageFileCopy(s, fileCopyOf(s), uid, gid);
        }
        for (const d of [s.upper, s.work, s.merged]) await mkdirMode(d, 0o755);
        await chownTo(s.upper, uid, gid);
        if (!useBwrapOverlay) {
          // The lower dir is the agent's descriptor of the scope root, not its path: nothing swapped
          // in since it was opened can become what the sandbox sees.
          return mountScopeOverlay(mnt, s, mounted, false, idmap);
        }
        return null;
      }),
    );
    if (useStrace) writeFileSync(logFile, '', { mode: 0o600 });
    if (spec.network) {
      proxy = new NetworkProxy({ grant: spec.network.grant, caps: spec.network.caps, ...(spec.network.resolve ? { resolve: spec.network.resolve } : {}), onCap: (_cap, message) => onNetworkCap?.(message) });
      await proxy.listen(proxySocket, { uid, gid });
    }
    const [inputs, , scopeProblems] = await Promise.all([inputsP, outP, scopesP]);
    const refusedScopes = scopeProblems.filter((p): p is Problem => p !== null);
    if (refusedScopes.length > 0) return errorObservation(runId, caps, refusedScopes);
    // The copy the sandbox will see is what must match the declaration: a file swapped after the
    // caller's check is caught here, before anything runs.
    const changed = inputs.flatMap((got, k) => {
      const want = spec.inputs?.[k]?.sha256;
      return want !== undefined && want !== got.sha256 ? [{ code: 'NS_INPUT_HASH_MISMATCH', message: `input ${got.name} has sha256 ${got.sha256} as staged for the sandbox, the request declares ${want}: nothing ran`, path: `inputs.${got.name}` }] : [];
    });
    if (changed.length > 0) return errorObservation(runId, caps, changed);
    // The folder the results go to exists before anything runs (it was being made meanwhile).
    const noFolder = await parentReady.then(() => null, (e: Error) => e.message);
    if (noFolder !== null) return errorObservation(runId, caps, [{ code: 'NS_OUTDIR', message: `cannot make the folder of ${spec.outDir}: ${noFolder}; nothing ran` }]);
    const unusable = outDirProblem(spec.outDir);
    if (unusable !== null) return errorObservation(runId, caps, [{ code: 'NS_OUTDIR', message: `cannot use ${spec.outDir} for /out: ${unusable}; nothing ran` }]);

    // ---- bwrap arguments ----
    const cwd = spec.cwd ?? '/tmp';
    const env = { ...(spec.env ?? {}), ...baseEnv(plan.path, cwd), ...(spec.network ? proxyEnv() : {}) };
    const a: string[] = [...namespaceArgs(bwrap), ...plan.args, ...folderArgs(folders, limits)];
    scopeDirs.forEach((s, i) => {
      const ro = scopes[i]?.readOnly === true;
      if (s.kind === 'file') a.push(ro ? '--ro-bind' : '--bind', fileCopyOf(s), s.hostPath);
      else if (useBwrapOverlay) a.push('--overlay-src', s.hostPath, ...(ro ? ['--ro-overlay', s.hostPath] : ['--overlay', s.upper, s.work, s.hostPath]));
      else a.push(ro ? '--ro-bind' : '--bind', s.merged, s.hostPath);
    });
    a.push(...READ_ONLY_ROOT, '--clearenv');
    for (const [k, v] of Object.entries(env)) a.push('--setenv', k, v);
    a.push('--chdir', cwd, '--info-fd', '3', '--block-fd', '4', '--seccomp', '5', '--', program, ...spec.argv.slice(1));

    // rlimits: RLIMIT_CPU (whole seconds) and RLIMIT_CORE=0, plus RLIMIT_FSIZE when /out is not a capped
    // tmpfs. The tracer sets them on bwrap before its exec; otherwise the host helper sets them on
    // bwrap's init B while it is blocked (below), or, without it, prlimit execs first (as root, before
    // strace), so its exec stays out of the strace log.
    const cpuS = Math.ceil(limits.cpuMs / 1000);
    const fsize = caps.tmpfsSizeCaps.hostOut ? null : limits.outBytes;
    // The backstops where no cgroup counts (RLIMIT_NPROC needs the tracer or the helper to reach bwrap's init).
    const rl = rlimitBackstops(cg, limits);
    const backstop = { asBytes: rl.asBytes, nproc: tracer || ops ? rl.nproc : null };
    const backstops = [...(backstop.asBytes !== null && (tracer || ops || caps.prlimitBinary) ? (['memoryBytes'] as const) : []), ...(backstop.nproc !== null ? (['pids'] as const) : [])];
    const started = new Date();
    const t0 = performance.now();
    let launch: SandboxLaunch;
    if (pooled) launch = pooled.launch;
    else if (tracer) {
      heldUsed = held !== null;
      launch = launchWithTracer(tracer, {
        argv: [bwrap.path, ...a],
        stdoutFifo: join(dir, 'stdout'),
        stderrFifo: join(dir, 'stderr'),
        seccompFile: observeFilterIn(base!),
        cgroupProcs: cg ? cg.dirs.map((d) => join(d, 'cgroup.procs')) : [],
        limits: { cpuSoftS: cpuS, cpuHardS: cpuS + 1, fsizeBytes: fsize, asBytes: backstop.asBytes, nproc: backstop.nproc, uid, gid, group: ids.group },
        hold: spec.network !== undefined,
        ...(held ? { held: held.launcher } : {}),
      });
    } else {
      const cmd: string[] = [];
      if (!ops && caps.prlimitBinary) cmd.push(caps.prlimitBinary, `--cpu=${cpuS}:${cpuS + 1}`, '--core=0', ...(fsize === null ? [] : [`--fsize=${fsize}`]), ...(backstop.asBytes === null ? [] : [`--as=${backstop.asBytes}`]), '--');
      if (useStrace) {
        const sv = straceArgv(logFile);
        sv[0] = caps.strace!.path;
        const dd = sv.lastIndexOf('--');
        const userOpts = asRoot ? ['-u', caps.sandboxHostUser!.name] : [];
        cmd.push(...(dd >= 0 ? [...sv.slice(0, dd), ...userOpts, ...sv.slice(dd)] : [...sv, ...userOpts]));
      }
      cmd.push(bwrap.path, ...a);
      launch = launchWithNode({
        cmd,
        // strace starts as root and drops to the sandbox user itself (-u); otherwise node drops before exec.
        ids: asRoot && !useStrace ? { uid, gid, group: ids.group } : null,
        filter: plainSeccompFilter(),
        prepare: async (pid) => {
          try {
            cg?.addProcess(pid);
          } catch (e) {
            return `cannot move the sandbox into its cgroup: ${(e as Error).message}`;
          }
          const rlErr = ops ? await ops.setRlimits(pid, uid, gid, cpuS, cpuS + 1, fsize, backstop) : null;
          if (rlErr !== null) return `cannot set the sandbox's rlimits: ${rlErr}`;
          const sealErr = ops ? await ops.sealDevices(pid) : null;
          return sealErr === null ? null : `cannot make the host's device nodes in the sandbox's /dev read-only: ${sealErr}`;
        },
      });
    }
    launched = launch;
    const out = new StreamCapture(limits.stdoutBytes);
    const err = new StreamCapture(limits.stderrBytes);
    const live = (stream: 'stdout' | 'stderr') =>
      spec.onEvent && ((chunk: Buffer | null, afterBytes: number) => spec.onEvent?.(chunk ? { kind: 'output', stream, chunk } : { kind: 'dropped', stream, afterBytes }));
    out.attach(launch.stdout, live('stdout'));
    err.attach(launch.stderr, live('stderr'));

    let kill: Kill | null = null;
    let released = false;
    let setupError: string | null = null;
    let initPid: number | null = null;
    let tracerRefused = false;
    const killEverything = async (k: Kill): Promise<void> => {
      if (kill) return;
      kill = k;
      if (cg && released) await cg.killAll().catch(() => undefined);
      if (!released) {
        // B is still blocked on --block-fd: bwrap sets its parent-death signal only later, so killing A
        // alone would orphan B, which keeps our pipes open (the run would never end). Kill B itself.
        if (initPid !== null) {
          try {
            process.kill(initPid, 'SIGKILL');
          } catch {
            /* already gone */
          }
        }
        if (cg) await cg.killAll().catch(() => undefined);
      }
      if (!released || !cg) launch.kill();
      setTimeout(() => launch.kill(), 500).unref();
    };
    // bwrap's init is blocked, in its cgroup, with its rlimits (and traced): bridge the network when
    // the run has it, then let the init go on.
    void launch.ready.then(async (r) => {
      initPid = r.initPid;
      if ('error' in r) {
        tracerRefused = r.tracerRefused;
        const why = r.tracerRefused ? `cannot hand the sandbox to the syscall tracer: ${r.error}` : r.error;
        setupError = why;
        return void killEverything({ status: 'SANDBOX_ERROR', limit: null, reason: why });
      }
      if (proxy && !kill) {
        try {
          const f = await startForwarder({ perl: caps.perlBinary!, initPid: r.initPid, socketPath: proxySocket, uid, gid, maxPairs: bridgePairs(spec.network!.caps) });
          forwarder = f;
          // The run may have been ended while the bridge started: never leave it behind.
          if (kill || runOver) f.stop();
        } catch (e) {
          setupError = `cannot bridge the sandbox to its network proxy: ${(e as Error).message}`;
          return void killEverything({ status: 'SANDBOX_ERROR', limit: null, reason: setupError });
        }
      }
      if (kill) return;
      released = true;
      tReleased = performance.now();
      spec.onEvent?.({ kind: 'phase', phase: 'running' });
      if (!pooled) return launch.release();
      const notSent = pooled.start(cwd, [program, ...spec.argv.slice(1)], env);
      if (notSent) {
        setupError = notSent;
        void killEverything({ status: 'SANDBOX_ERROR', limit: null, reason: notSent });
      }
    });
    onNetworkCap = (message) => void killEverything({ status: 'RESOURCE_KILLED', limit: null, reason: message });
    const wall = setTimeout(() => void killEverything({ status: 'TIMEOUT', limit: 'wallMs', reason: `wall time ${limits.wallMs} ms exceeded: killed by the host` }), limits.wallMs);
    // A caller's cancel (e.g. a UTP cancel command) ends the run the same way, as a host decision.
    const onCancel = () => void killEverything({ status: 'POLICY_ABORTED', limit: null, reason: 'canceled by the caller: killed by the host' });
    if (spec.signal?.aborted) onCancel();
    else spec.signal?.addEventListener('abort', onCancel, { once: true });
    const poll = cg
      ? setInterval(() => {
          if (!released || kill || !cg) return;
          const hit = cg.limitHit();
          if (hit.memory) void killEverything({ status: 'RESOURCE_KILLED', limit: 'memoryBytes', reason: `memory limit ${limits.memoryBytes} bytes: the kernel OOM-killed a process; the run was ended` });
          else if (hit.pids) void killEverything({ status: 'RESOURCE_KILLED', limit: 'pids', reason: `process limit ${limits.pids}: a fork was refused; the run was ended` });
          else {
            const cpu = cg.cpuTotalMs();
            if (cpu !== null && cpu > limits.cpuMs) void killEverything({ status: 'RESOURCE_KILLED', limit: 'cpuMs', reason: `CPU time limit ${limits.cpuMs} ms exceeded (${Math.round(cpu)} ms): killed by the host` });
          }
        }, POLL_MS)
      : null;

    const end = await launch.closed;
    sandboxGone = true;
    const tEnded = performance.now();
    spec.onEvent?.({ kind: 'phase', phase: 'observing' });
    if (end.spawnError && !setupError) setupError = end.spawnError;
    spec.signal?.removeEventListener('abort', onCancel);
    const wallMs = performance.now() - t0;
    clearTimeout(wall);
    if (poll) clearInterval(poll);
    const ended = new Date();
    // The program ended (or was killed): nothing of the sandbox may survive it.
    if (cg) await cg.killAll().catch((e: Error) => cleanupErrors.push(`kill: ${e.message}`));
    const usage = cg?.usage() ?? null;
    // Its network ends with it: cut every connection, then read the host's record.
    let network: NetworkObservation | undefined;
    if (proxy) {
      (forwarder as Forwarder | null)?.stop();
      await proxy.close();
      network = proxy.observation({ address: PROXY_HOST, port: PROXY_PORT, bridge: `unix socket -> host proxy (perl bridge in the sandbox's network namespace)` }, describeGrant(spec.network!.grant));
    }

    // ---- side effects (host tracer or strace) ----
    let sideEffects: ObservedSideEffects | null = null;
    let sideEffectsUnavailable: string | undefined;
    let straceLog = '';
    let fromTracer: { code: number | null; signal: string | null } | null = null;
    const tr = launch.trace;
    if (tr) {
      let settle: NodeJS.Timeout | undefined;
      const settled = await Promise.race([tr.done.then(() => true), new Promise<boolean>((r) => (settle = setTimeout(() => r(false), TRACE_SETTLE_MS)))]);
      clearTimeout(settle);
      if (tr.lost) sideEffectsUnavailable = tr.lost;
      else if (!settled) sideEffectsUnavailable = `the syscall tracer did not report the end of the run within ${TRACE_SETTLE_MS} ms: the trace is incomplete`;
      else {
        const t = sideEffectsFromTrace(tr.lines, launch.bwrapPid(), pooled ? LAUNCHER_IN_SANDBOX : null);
        sideEffects = t.sideEffects;
        fromTracer = t.programEnd;
      }
    } else if (tracer) sideEffectsUnavailable = 'the syscall tracer was never attached (the sandbox ended during set-up)';
    else if (useStrace) {
      try {
        straceLog = readFileSync(logFile, 'utf8');
        sideEffects = parseStraceLog(straceLog, { bwrapPath: bwrap.path, cwd });
      } catch (e) {
        sideEffectsUnavailable = `the strace log could not be parsed: ${(e as Error).message}`;
      }
    } else sideEffectsUnavailable = !wantTrace ? 'syscall tracing was turned off for this run (traceSyscalls: false)' : 'no syscall tracer on this host (airlock-tracer not built or not root, and strace not installed): side effects are unobserved';

    // Only what the sandbox refused is worth a report: writes outside its writable areas, reads of the
    // host's secret places that this run does not expose (an interpreter's prefix, a scope).
    if (sideEffects) {
      const scopePaths = scopes.map((sc) => sc.hostPath);
      sideEffects = {
        ...sideEffects,
        fileAccess: refusedFileAccess(sideEffects.fileAccess, { writable: ['/out', '/tmp', '/dev/shm', ...scopePaths], exposed: [...plan.prefixes.map((x) => x.path), ...scopePaths] }),
        // glibc's and runtimes' own probes (nscd on a host without it, a loopback bind to port 0) reach nothing.
        networkAttempts: withoutProbes(sideEffects.networkAttempts),
      };
    }

    // ---- exit ----
    const stderrRes = err.result();
    let exit: RunExit = { code: end.code, signal: end.signal, source: 'bwrap-exit-code' };
    const fromStrace = useStrace ? programEndFromStrace(straceLog, sideEffects?.programPid ?? null) : null;
    if (fromStrace) exit = { ...fromStrace, source: 'strace' };
    else if (fromTracer) exit = { ...fromTracer, source: 'tracer' };
    else if (end.code !== null && end.code > 128 && end.code < 128 + 65) exit = { code: null, signal: SIGNALS[end.code - 128] ?? `SIG${end.code - 128}`, source: 'bwrap-exit-code' };
    // bwrap's own failure (exit 1), or airlock-exec's in a pooled sandbox (exit 127), before any program ran.
    const bwrapFailed = !fromStrace && !fromTracer && end.code === (pooled ? 127 : 1) && (pooled ? /^airlock-exec: /m : /^bwrap: /m).test(stderrRes.bytes.toString('utf8').slice(0, 4096)) && (sideEffects === null || sideEffects.programPid === null);
    if (!released && !setupError && !kill) setupError = 'bwrap ended before the sandbox was set up';
    // A program the sandbox does not have (or cannot execute) is the caller's mistake, not the host's:
    // it ends as a shell reports it (127, 126), in the launcher's own words.
    // Only with the trace saying no program started: stderr is the program's too once it runs.
    const notExecuted = bwrapFailed && sideEffects !== null && sideEffects.programPid === null ? programNotExecuted(stderrRes.bytes.toString('utf8').slice(0, 4096), program, pooled !== null) : null;
    if (notExecuted) exit = { code: notExecuted.code, signal: null, source: 'bwrap-exit-code' };
    else if (bwrapFailed) setupError = `bwrap could not set up the sandbox: ${stderrRes.bytes.toString('utf8').slice(0, 300).trim()}`;

    // ---- files ----
    const tDiff = performance.now();
    // Whatever the program left, the host's diff, hashes and copies stay within the run's own caps
    // and its time limit plus a fixed margin: past them they stop, and the run is over its limits.
    const limitsExceeded = new Set<LimitName>();
    const budget = new DiffBudget({ files: limits.files, bytes: limits.outBytes, deadline: started.getTime() + limits.wallMs + OBSERVE_MARGIN_MS });
    const overBudget = (e: unknown): string => {
      if (!(e instanceof DiffBudgetExceeded)) throw e;
      if (e.limit !== 'time') limitsExceeded.add(e.limit);
      return e.message;
    };
    let outChanges: FsChange[] | null = null;
    let outError: string | undefined;
    try {
      outChanges = diffSnapshots({ root: outStage, entries: new Map() }, await snapshotTree(outStage, budget), { mountPoint: '/out' });
    } catch (e) {
      outError = e instanceof DiffBudgetExceeded ? `the /out diff stopped: ${overBudget(e)}` : `the /out diff failed: ${(e as Error).message}`;
    }
    for (const [fs, bytesLimit] of [[sharedDisk, 'outBytes'], [scratch, 'tmpBytes']] as const) {
      const full = fs ? tmpfsFull(fs) : null;
      if (full?.bytes) limitsExceeded.add(bytesLimit);
      if (full?.inodes) limitsExceeded.add('files');
    }
    const outBytesUsed = (outChanges ?? []).reduce((n, c) => n + (c.type === 'file' || c.type === 'hardlink' ? c.size : 0), 0);
    try {
      // Only a /out the diff could account for is copied: nothing past the caps reaches the host.
      if (outChanges && outChanges.length > 0) {
        makeOutDir(spec.outDir);
        await copyTreeNoFollow(outStage, spec.outDir);
      }
    } catch (e) {
      outError = [outError, `copying /out to ${spec.outDir} failed: ${(e as Error).message}`].filter(Boolean).join('; ');
    }
    const scopeObs: ScopeObservation[] = [];
    let scopeBytes = 0;
    for (const s of scopeDirs) {
      const mechanism = s.kind === 'file' ? 'file-copy' : useBwrapOverlay ? 'bwrap-overlay' : 'host-overlayfs';
      const o = await observeScope(s, mechanism, { ...(spec.keepScopeContent ? { blobs: spec.keepScopeContent } : {}), ...(spec.keepScopePreimages ? { tombstones: spec.keepScopePreimages } : {}) }, budget);
      if (o.budgetExceeded && o.budgetExceeded !== 'time') limitsExceeded.add(o.budgetExceeded);
      for (const c of o.changes ?? []) if (c.change !== 'deleted' && c.type === 'file') scopeBytes += c.size;
      scopeObs.push(o);
    }
    const scratchUse = scratch ? await observeScratch(scratch, budget.limits.deadline, limits.files) : null;
    const tDiffEnd = performance.now();

    // The one disk limit covers /out and the scopes together (post-checked also where a tmpfs capped it).
    if (outBytesUsed + scopeBytes > limits.outBytes) limitsExceeded.add('outBytes');

    // ---- resources ----
    const noCgroupWhy = `no usable cgroup for this run (${caps.cgroup.detail})${caps.cgroup.fix ? `; fix: ${caps.cgroup.fix}` : ''}`;
    const resources: Resources = {
      cpuUserMs: usage?.cpuUserMs ?? null,
      cpuSystemMs: usage?.cpuSystemMs ?? null,
      peakMemoryBytes: usage?.peakMemoryBytes ?? null,
      diskWriteBytes: outBytesUsed + scopeBytes,
      networkBytesIn: network ? network.bytesIn : 0,
      networkBytesOut: network ? network.bytesOut : 0,
      wallMs,
      unmeasured: usage ? { ...usage.unmeasured } : { cpuUserMs: noCgroupWhy, cpuSystemMs: noCgroupWhy, peakMemoryBytes: noCgroupWhy },
      basis: {
        diskWriteBytes: 'bytes of regular files left in /out and in the scope overlays at the end; /tmp writes and data deleted before the end are not counted',
        networkBytesIn: network
          ? 'bytes received from the destinations, counted by the host proxy (the only route out of the empty network namespace)'
          : 'empty network namespace (loopback only, never counted): no route out exists, so 0 by construction',
        networkBytesOut: network
          ? 'bytes sent to the destinations, counted by the host proxy (the only route out of the empty network namespace)'
          : 'empty network namespace (loopback only, never counted): no route out exists, so 0 by construction',
        wallMs: 'host clock from spawn to the end of the last sandbox process',
      },
    };
    if (usage && resources.cpuUserMs !== null && resources.cpuSystemMs !== null && resources.cpuUserMs + resources.cpuSystemMs > limits.cpuMs) limitsExceeded.add('cpuMs');
    if (usage?.oomKilled) limitsExceeded.add('memoryBytes');
    if (usage?.pidsLimitHit) limitsExceeded.add('pids');
    // Where RLIMIT_NPROC is the processes limit (no pids cgroup), the refused forks say it was reached.
    if (!cg?.enforces.pids && (sideEffects?.processesSpawned.refusedForks ?? 0) > 0) limitsExceeded.add('pids');
    if (kill) {
      const k = kill as Kill;
      if (k.limit) limitsExceeded.add(k.limit);
    }

    // ---- status ----
    let status: RunStatus;
    let reason: string;
    const k = kill as Kill | null;
    if (setupError && (!k || k.status === 'SANDBOX_ERROR')) {
      status = 'SANDBOX_ERROR';
      reason = usage?.oomKilled ? `${setupError} (the kernel OOM-killed it: a memory limit of ${limits.memoryBytes} bytes is too small to start the sandbox)` : setupError;
      if (usage?.oomKilled) limitsExceeded.add('memoryBytes');
    } else if (k) {
      status = k.status;
      reason = k.reason;
    } else if (usage?.oomKilled) {
      status = 'RESOURCE_KILLED';
      reason = `memory limit ${limits.memoryBytes} bytes: the kernel OOM-killed a process`;
    } else if (exit.signal === 'SIGXCPU' || (exit.signal === 'SIGKILL' && limitsExceeded.has('cpuMs'))) {
      status = 'RESOURCE_KILLED';
      limitsExceeded.add('cpuMs');
      reason = `CPU time limit ${limits.cpuMs} ms: killed by RLIMIT_CPU (${exit.signal})`;
    } else if (exit.signal === 'SIGXFSZ') {
      status = 'RESOURCE_KILLED';
      limitsExceeded.add('outBytes');
      reason = `output size limit ${limits.outBytes} bytes: killed by RLIMIT_FSIZE`;
    } else if (exit.signal === 'SIGSYS') {
      status = 'POLICY_ABORTED';
      reason = 'the program made a syscall the seccomp policy forbids and was killed by SIGSYS';
    } else if (notExecuted) {
      status = 'FAILURE';
      reason = notExecuted.reason;
    } else if (exit.code === 0 && exit.signal === null) {
      status = 'SUCCESS';
      reason = 'exited with 0';
    } else {
      status = 'FAILURE';
      reason = exit.signal ? `killed by ${exit.signal}` : `exited with ${exit.code}`;
    }
    return {
      runId,
      startedAt: started.toISOString(),
      endedAt: ended.toISOString(),
      wallMs,
      exit,
      status,
      reason,
      limitsExceeded: LIMIT_NAMES.filter((l) => limitsExceeded.has(l)),
      stdout: out.result(),
      stderr: stderrRes,
      resources,
      sideEffects,
      ...(sideEffectsUnavailable ? { sideEffectsUnavailable } : {}),
      fs: { out: outChanges, ...(outError ? { outError } : {}), scopes: scopeObs },
      ...(scratchUse ? { scratch: scratchUse } : {}),
      inputs,
      host: { ...hostFacts(caps, ids, spec, cg, observedBy, [...backstops]), sandboxStart: pooled ? 'ahead of need' : launch.fromHeld() ? 'on request, held launcher' : 'on request' },
      timings: { stagingMs: t0 - tStart, launchMs: (tReleased || tEnded) - t0, programMs: tReleased ? tEnded - tReleased : 0, observeMs: tDiff - tEnded + (performance.now() - tDiffEnd), diffMs: tDiffEnd - tDiff },
      ...(network ? { network } : {}),
      problems: status === 'SANDBOX_ERROR' ? [{ code: tracerRefused ? 'NS_TRACER_REFUSED' : 'NS_SANDBOX_FAILED', message: reason }] : [],
    };
  } finally {
    // Every sandbox process is dead by now (killAll above, or nothing was started): what is left is
    // bookkeeping, done after the result is returned and tracked by sandboxIdle().
    openingScopes.then((o) => o.ok && closeScopes(o.scopes), () => undefined);
    const group = cg as RunCgroup | null;
    runOver = true;
    (forwarder as Forwarder | null)?.stop();
    const px = proxy as NetworkProxy | null;
    // A pooled sandbox whose run ended before its command was sent (an input refused) still waits.
    pooled?.close();
    if (pooled && !sandboxGone) pooled.launch.kill();
    background(async () => {
      if (px) await px.close();
      if (held && !heldUsed) await endUnused(held);
      if ((await removeRunFolders(folders, group, caps, cleanupErrors)).length > 0) process.emitWarning(`airlock ns run ${runId}: cleanup incomplete: ${cleanupErrors.join('; ')} (staging kept at ${dir})`);
      // The uid goes back only when nothing of the run is left: no folder of it, no process.
      else if (sandboxGone || !launched || (await ended(launched))) ids.release();
      if (held) refillHeldLaunchers();
      // The next run of this shape finds a sandbox waiting (when the process keeps a pool).
      // Not for a writer whose scope was found meanwhile to be one without idmapped mounts: its runs start their own.
      if (shape && !(writesScope && idmapRefused(scopes.map((sc) => sc.hostPath))) && (await scopesAreDirs().catch(() => false))) refillPool(shape, { limits, scopes: scopes.map((sc) => ({ hostPath: sc.hostPath, readOnly: sc.readOnly === true })) }, caps);
    });
  }
}
