// Host capability probe: what this machine can enforce for the `ns` lane, measured, not assumed.
// Returns data only (the CLI prints it). The result is cached per process: runNs calls it on every
// run and must not pay for the probes again.
import { execFile } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { detectCgroups, type CgroupInfo } from './cgroup/index.js';
import type { LimitName } from './types.js';
import { ptraceRefusedBecause, tracerBinaryPath } from './observe/tracer.js';
import { hostSandboxUser, SANDBOX_USER_NAME, type SandboxHostUser } from './sandbox-user.js';
import { hostRunIds } from './run-ids.js';

export interface BwrapInfo {
  path: string;
  version: string;
  /** Parsed [major, minor, patch]. */
  versionParts: [number, number, number];
  supports: {
    disableUserns: boolean;
    overlay: boolean;
    size: boolean;
    roBindFd: boolean;
    infoFd: boolean;
    blockFd: boolean;
    seccompFd: boolean;
  };
}

export interface InterpreterInfo {
  name: 'python3' | 'node' | 'ruby' | 'go';
  /** Real path of the executable (symlinks resolved). */
  executable: string;
  /** Real installation prefix; bound read-only at the same path when it is outside /usr. */
  prefix: string;
  version: string;
}

/** What enforces a limit: the kernel through a cgroup (root's, or a subtree delegated to this user),
 *  a per-process rlimit (weaker: it bounds each process, not the sandbox as a whole), the host itself
 *  (timer, capture cap, post-check), a capped tmpfs, or nothing. */
export type LimitMechanism = 'cgroup' | 'cgroup-delegated' | 'rlimit' | 'tmpfs' | 'host' | 'none';

export interface LimitPlan {
  limit: LimitName;
  /** The judge counts the limit as enforced (a backstop rlimit on memory or pids does not count). */
  enforced: boolean;
  mechanism: LimitMechanism;
  /** How (enforced) or why not (only reported). */
  how: string;
}

/** What every `ns` run on this host will get from the judge, predicted from the probe. */
export interface RunOutlook {
  /** Why every run will be BLOCKed (empty: runs can be PROMOTEd). */
  blockedBecause: string[];
  /** The command that lifts it, when there is one. */
  fix?: string;
}

export interface HostCapabilities {
  platform: string;
  kernel: string;
  isRoot: boolean;
  userNamespaces: { available: boolean; detail: string };
  bwrap: BwrapInfo | null;
  /** Host user the sandbox runs as (bwrap is started as this uid; null when not root: we run as ourselves). */
  sandboxHostUser: SandboxHostUser | null;
  /** Root: the range each sandbox takes a uid and gid of its own from, or why every sandbox shares the sandbox user's (run-ids.ts). */
  runIds: ReturnType<typeof hostRunIds>;
  cgroup: CgroupInfo;
  seccomp: { available: boolean; detail: string };
  overlayfs: boolean;
  strace: { path: string; version: string } | null;
  mountBinary: string | null;
  umountBinary: string | null;
  prlimitBinary: string | null;
  /** perl, used as the long-lived host helper for mount(2)/umount2(2)/prlimit64(2) (src/sandbox/ns/hostops.ts);
   *  null: the runner execs mount/umount/prlimit per run instead (slower, same guarantees). */
  perlBinary: string | null;
  tmpfsSizeCaps: { hostOut: boolean; sandboxTmp: boolean; detail: string };
  interpreters: InterpreterInfo[];
  limits: LimitPlan[];
  /** Host features the ns lane cannot work without that are missing (empty: the lane works). */
  blockers: string[];
  /** The lane works, but would the judge accept a run? (`airlock doctor`'s last line.) */
  outlook: RunOutlook;
}

const SAFE_ENV = { PATH: '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin', LC_ALL: 'C' };

function run(file: string, args: string[], opts: { uid?: number; gid?: number; env?: NodeJS.ProcessEnv } = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: 5000, maxBuffer: 1 << 20, env: opts.env ?? SAFE_ENV, uid: opts.uid, gid: opts.gid }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : null) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/** Find an executable in fixed system directories (never the caller's PATH: it may be hostile). */
export function findSystemBinary(name: string, extraDirs: string[] = []): string | null {
  for (const dir of ['/usr/bin', '/bin', '/usr/sbin', '/sbin', '/usr/local/bin', ...extraDirs]) {
    const p = join(dir, name);
    try {
      accessSync(p, constants.X_OK);
      if (statSync(p).isFile()) return p;
    } catch {
      /* not here */
    }
  }
  return null;
}

/** The host's own interpreter: the caller's PATH order first (pyenv shims...), then system dirs. */
function findOnHostPath(name: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(':').filter((d) => d.startsWith('/'))) {
    const p = join(dir, name);
    try {
      accessSync(p, constants.X_OK);
      if (statSync(p).isFile()) return p;
    } catch {
      /* next */
    }
  }
  return findSystemBinary(name);
}

export function parseBwrapVersion(text: string): [number, number, number] | null {
  const m = /bubblewrap\s+(\d+)\.(\d+)(?:\.(\d+))?/.exec(text);
  if (!m) return null;
  return [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
}

async function probeBwrap(): Promise<BwrapInfo | null> {
  const path = findSystemBinary('bwrap');
  if (!path) return null;
  const v = await run(path, ['--version']);
  const parts = parseBwrapVersion(v.stdout);
  if (!parts) return null;
  const help = await run(path, ['--help']);
  const h = help.stdout + help.stderr;
  const has = (opt: string): boolean => new RegExp(`^\\s*${opt.replace(/-/g, '\\-')}\\s`, 'm').test(h);
  return {
    path,
    version: parts.join('.'),
    versionParts: parts,
    supports: {
      disableUserns: has('--disable-userns'),
      overlay: has('--overlay-src') && has('--overlay'),
      size: has('--size'),
      roBindFd: has('--ro-bind-fd'),
      infoFd: has('--info-fd'),
      blockFd: has('--block-fd'),
      seccompFd: has('--seccomp'),
    },
  };
}

function readText(p: string): string | null {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return null;
  }
}

async function probeUserns(bwrap: BwrapInfo | null, user: { uid: number; gid: number } | null): Promise<{ available: boolean; detail: string }> {
  const max = readText('/proc/sys/user/max_user_namespaces');
  if (max !== null && Number(max.trim()) === 0) return { available: false, detail: 'user.max_user_namespaces is 0' };
  const clone = readText('/proc/sys/kernel/unprivileged_userns_clone');
  if (clone !== null && clone.trim() === '0') return { available: false, detail: 'kernel.unprivileged_userns_clone is 0' };
  if (!bwrap) return { available: false, detail: 'bwrap is not installed, cannot probe' };
  // The real test: an unprivileged bwrap with a new user namespace running /usr/bin/true.
  const r = await run(bwrap.path, ['--unshare-user', '--unshare-pid', '--unshare-net', '--ro-bind', '/usr', '/usr', '--symlink', 'usr/lib', '/lib', '--symlink', 'usr/lib64', '/lib64', '--proc', '/proc', '--dev', '/dev', '/usr/bin/true'], user ? { uid: user.uid, gid: user.gid } : {});
  if (r.code === 0) return { available: true, detail: `an unprivileged bwrap (uid ${user?.uid ?? process.getuid?.()}) created user, pid and net namespaces` };
  return { available: false, detail: `unprivileged bwrap failed: ${r.stderr.trim().slice(0, 200)}` };
}

function probeSeccomp(): { available: boolean; detail: string } {
  const actions = readText('/proc/sys/kernel/seccomp/actions_avail');
  const status = readText('/proc/self/status') ?? '';
  if (!/^Seccomp:/m.test(status)) return { available: false, detail: 'the kernel has no CONFIG_SECCOMP' };
  if (actions !== null && !actions.split(/\s+/).includes('trap')) return { available: false, detail: `seccomp has no trap action (${actions.trim()})` };
  return { available: true, detail: actions ? `actions: ${actions.trim()}` : 'seccomp present' };
}

async function probeInterpreters(): Promise<InterpreterInfo[]> {
  const out: InterpreterInfo[] = [];
  const py = findOnHostPath('python3');
  if (py) {
    const r = await run(py, ['-c', 'import os,sys,platform;print(os.path.realpath(sys.executable));print(os.path.realpath(sys.base_prefix));print(platform.python_version())'], { env: { ...SAFE_ENV, PATH: process.env.PATH ?? SAFE_ENV.PATH, HOME: process.env.HOME ?? '/root', ...(process.env.PYENV_ROOT ? { PYENV_ROOT: process.env.PYENV_ROOT } : {}), ...(process.env.PYENV_VERSION ? { PYENV_VERSION: process.env.PYENV_VERSION } : {}) } });
    const [exe, prefix, version] = r.stdout.trim().split('\n');
    if (r.code === 0 && exe && prefix && version) out.push({ name: 'python3', executable: exe, prefix, version });
  }
  // node: this very process is a node; prefer it (the host's interpreter for TRs in JavaScript).
  try {
    const exe = realpathSync(process.execPath);
    out.push({ name: 'node', executable: exe, prefix: dirname(dirname(exe)), version: process.versions.node });
  } catch {
    /* cannot happen on a sane host */
  }
  const ruby = findOnHostPath('ruby');
  if (ruby) {
    const r = await run(ruby, ['-e', 'puts File.realpath(RbConfig.ruby); puts File.realpath(RbConfig::CONFIG["prefix"]); puts RUBY_VERSION']);
    const [exe, prefix, version] = r.stdout.trim().split('\n');
    if (r.code === 0 && exe && prefix && version) out.push({ name: 'ruby', executable: exe, prefix, version });
  }
  const go = findOnHostPath('go');
  if (go) {
    const r = await run(go, ['env', 'GOROOT', 'GOVERSION'], { env: { ...SAFE_ENV, HOME: '/tmp' } });
    const [root, version] = r.stdout.trim().split('\n');
    if (r.code === 0 && root && version) {
      const realRoot = realpathSync(root);
      out.push({ name: 'go', executable: join(realRoot, 'bin', 'go'), prefix: realRoot, version });
    }
  }
  return out;
}

/** The rlimits the runner sets without a cgroup: only as a backstop (see LimitPlan.enforced). */
export const RLIMIT_BACKSTOP = {
  memoryBytes: 'RLIMIT_AS per process (address space, not memory used; node, Go and the JVM reserve more than they use and can fail to start under it)',
  pids: 'RLIMIT_NPROC on the sandbox\'s user namespace (processes and threads; no memory or CPU accounting comes with it)',
} as const;

export function planLimits(c: Pick<HostCapabilities, 'cgroup' | 'tmpfsSizeCaps' | 'prlimitBinary'> & { perlBinary?: string | null }): LimitPlan[] {
  const cg = c.cgroup;
  // rlimits are set by the perl helper (prlimit64 on bwrap's init) or by an exec of prlimit.
  const rl = c.prlimitBinary !== null || (c.perlBinary ?? null) !== null;
  const mem = cg.usable && cg.controllers.includes('memory');
  const pids = cg.usable && cg.controllers.includes('pids');
  // v2 always has cpu.stat usage; v1 needs the cpuacct controller.
  const cpuAcct = cg.usable && (cg.version === 2 || cg.controllers.includes('cpuacct'));
  const delegated = cg.delegation?.kind === 'delegated';
  const cgMech: LimitMechanism = delegated ? 'cgroup-delegated' : 'cgroup';
  const cgName = `cgroup v${cg.version}${delegated ? ' (delegated to this user)' : ''}`;
  // The cgroup's detail and fix are said once (doctor's cgroups line and last line), not per limit.
  const noCgroup = cg.usable ? 'no usable cgroup' : `no usable cgroup${cg.fix ? ' (nothing delegated to this user)' : ''}`;
  const backstop = (limit: 'memoryBytes' | 'pids', controller: string): LimitPlan =>
    rl
      ? { limit, enforced: false, mechanism: 'rlimit', how: `${noCgroup.replace('no usable cgroup', `no ${controller} cgroup`)}: only ${RLIMIT_BACKSTOP[limit]} as a backstop, weaker than a cgroup, so not counted as enforced` }
      : { limit, enforced: false, mechanism: 'none', how: `${noCgroup.replace('no usable cgroup', `no ${controller} cgroup`)} and no prlimit: only reported` };
  return [
    { limit: 'wallMs', enforced: true, mechanism: 'host', how: `host timer, then the whole ${cg.usable ? 'cgroup' : 'pid namespace'} is killed` },
    cpuAcct
      ? { limit: 'cpuMs', enforced: true, mechanism: cgMech, how: `host polls ${cgName} CPU usage of all processes and kills over the limit${rl ? '; RLIMIT_CPU per process too' : ''}` }
      : rl
        ? { limit: 'cpuMs', enforced: true, mechanism: 'rlimit', how: `RLIMIT_CPU per process only (weaker than a cgroup: each process gets the whole budget; CPU time is unmeasured): ${noCgroup}` }
        : { limit: 'cpuMs', enforced: false, mechanism: 'none', how: 'no cgroup cpu accounting and no prlimit: only reported' },
    mem ? { limit: 'memoryBytes', enforced: true, mechanism: cgMech, how: `${cgName} memory limit (swap ${cg.swapAccounting ? 'included' : 'not accounted'}); peak memory measured` } : backstop('memoryBytes', 'memory'),
    pids ? { limit: 'pids', enforced: true, mechanism: cgMech, how: `${cgName} pids limit` } : backstop('pids', 'pids'),
    c.tmpfsSizeCaps.hostOut
      ? { limit: 'outBytes', enforced: true, mechanism: 'tmpfs', how: 'size-capped tmpfs mounted by root on the host staging dir' }
      : rl
        ? { limit: 'outBytes', enforced: true, mechanism: 'rlimit', how: 'RLIMIT_FSIZE per file + post-check of the total (a total over the cap is caught after the run, not prevented)' }
        : { limit: 'outBytes', enforced: true, mechanism: 'host', how: 'post-check of the total only (not prevented)' },
    {
      limit: 'tmpBytes',
      enforced: c.tmpfsSizeCaps.hostOut || c.tmpfsSizeCaps.sandboxTmp,
      mechanism: c.tmpfsSizeCaps.hostOut || c.tmpfsSizeCaps.sandboxTmp ? 'tmpfs' : 'none',
      how: c.tmpfsSizeCaps.hostOut ? 'one size-capped tmpfs for /tmp and /dev/shm, mounted by root on the host staging dir' : c.tmpfsSizeCaps.sandboxTmp ? 'bwrap --size on the /tmp and /dev/shm tmpfs' : 'bwrap has no --size: only reported',
    },
    {
      limit: 'files',
      enforced: true,
      mechanism: c.tmpfsSizeCaps.hostOut ? 'tmpfs' : 'host',
      how: c.tmpfsSizeCaps.hostOut ? 'nr_inodes of the run\'s tmpfs mounts (/out with the scopes, /tmp with /dev/shm); the host diff stops past it' : 'post-check: the host diff stops past the cap (not prevented)',
    },
    { limit: 'stdoutBytes', enforced: true, mechanism: 'host', how: 'host keeps the first N bytes, counts and hashes the rest' },
    { limit: 'stderrBytes', enforced: true, mechanism: 'host', how: 'host keeps the first N bytes, counts and hashes the rest' },
  ];
}

/**
 * What the judge will say of every run here, from the same facts it judges by (judge.ts): a limit
 * only reported, a resource figure unmeasured (CPU and peak memory come from the cgroup), or side
 * effects unobserved BLOCK a run whatever the program does.
 */
export function runOutlook(c: Pick<HostCapabilities, 'cgroup' | 'limits' | 'strace' | 'blockers'>, tracerUsable: boolean): RunOutlook {
  if (c.blockers.length > 0) return { blockedBecause: [...c.blockers] };
  const why: string[] = [];
  const notEnforced = c.limits.filter((l) => !l.enforced).map((l) => l.limit);
  if (notEnforced.length) why.push(`limits not enforced: ${notEnforced.join(', ')}`);
  const cg = c.cgroup;
  const unmeasured = [
    ...(!cg.usable || !(cg.version === 2 || cg.controllers.includes('cpuacct')) ? ['CPU time'] : []),
    ...(!cg.usable || !cg.controllers.includes('memory') ? ['peak memory'] : []),
  ];
  if (unmeasured.length) why.push(`not measurable without a cgroup: ${unmeasured.join(', ')}`);
  if (!tracerUsable && c.strace === null) why.push('side effects cannot be observed (no syscall tracer usable and no strace: apt-get install strace)');
  const fix = cg.fix && (notEnforced.length || unmeasured.length) ? cg.fix : undefined;
  return { blockedBecause: why, ...(fix ? { fix } : {}) };
}

async function probe(): Promise<HostCapabilities> {
  const isRoot = process.getuid?.() === 0;
  const kernel = readText('/proc/sys/kernel/osrelease')?.trim() ?? 'unknown';
  const bwrap = await probeBwrap();
  const user = isRoot ? hostSandboxUser() : null;
  const runIds = isRoot ? hostRunIds() : { off: 'not root: sandboxes run as the caller' };
  const [userNamespaces, interpreters] = await Promise.all([probeUserns(bwrap, user), probeInterpreters()]);
  const cgroup = detectCgroups(isRoot);
  const seccomp = probeSeccomp();
  const overlayfs = /\boverlay\b/.test(readText('/proc/filesystems') ?? '');
  let strace: HostCapabilities['strace'] = null;
  const stracePath = findSystemBinary('strace');
  if (stracePath) {
    const r = await run(stracePath, ['-V']);
    const m = /version\s+(\S+)/.exec(r.stdout);
    if (r.code === 0 && m?.[1]) strace = { path: stracePath, version: m[1] };
  }
  const mountBinary = findSystemBinary('mount');
  const umountBinary = findSystemBinary('umount');
  const prlimitBinary = findSystemBinary('prlimit');
  const perlBinary = findSystemBinary('perl');
  const tmpfsSizeCaps = {
    hostOut: isRoot && ((mountBinary !== null && umountBinary !== null) || perlBinary !== null),
    sandboxTmp: bwrap?.supports.size ?? false,
    detail: isRoot ? (mountBinary || perlBinary ? 'root: /out is a size-capped tmpfs mounted on the host' : 'root but no mount binary') : 'not root: /out is capped by RLIMIT_FSIZE per file and a post-check',
  };
  const blockers: string[] = [];
  if (!bwrap) blockers.push('bubblewrap (bwrap) is not installed: apt-get install bubblewrap');
  else {
    for (const [k, v] of Object.entries(bwrap.supports)) {
      if (!v && ['infoFd', 'blockFd', 'seccompFd', 'roBindFd'].includes(k)) blockers.push(`bwrap ${bwrap.version} lacks a needed option (${k}): upgrade bubblewrap`);
    }
  }
  if (!userNamespaces.available) blockers.push(`user namespaces are unavailable: ${userNamespaces.detail}`);
  if (!seccomp.available) blockers.push(`seccomp is unavailable: ${seccomp.detail}`);
  if (isRoot && !user) blockers.push(`running as root but the host has neither a ${SANDBOX_USER_NAME} user nor a \`nobody\` with uid 65534 to run the sandbox as: airlock setup --sandbox-user`);
  const caps: HostCapabilities = {
    platform: process.platform,
    kernel,
    isRoot,
    userNamespaces,
    bwrap,
    sandboxHostUser: user,
    runIds,
    cgroup,
    seccomp,
    overlayfs,
    strace,
    mountBinary,
    umountBinary,
    prlimitBinary,
    perlBinary,
    tmpfsSizeCaps,
    interpreters,
    limits: [],
    blockers,
    outlook: { blockedBecause: [] },
  };
  caps.limits = planLimits(caps);
  caps.outlook = runOutlook(caps, tracerBinaryPath() !== null && process.env.AIRLOCK_SYSCALL_TRACER !== 'strace' && ptraceRefusedBecause(isRoot) === null);
  return caps;
}

let cached: Promise<HostCapabilities> | null = null;

/** Probe the host once per process (pass fresh=true to probe again). */
export function doctor(fresh = false): Promise<HostCapabilities> {
  if (fresh || !cached) cached = probe();
  return cached;
}

/** True when `p` exists (tiny helper shared by rootfs). */
export const exists = (p: string): boolean => existsSync(p);
