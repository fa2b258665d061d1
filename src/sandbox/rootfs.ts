// The read-only minimal root every ns run sees: /usr (and the /bin, /lib*, /sbin that point into it),
// a generated /etc subset (no host passwd, shadow, hostname, resolv.conf; one directory bound once,
// since every bind costs bwrap time on every run), the interpreters' own
// prefixes when they live outside /usr, a new /proc, a minimal /dev. Nothing of /home, /root, /run,
// /var or the host's sockets.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { HostCapabilities } from './doctor.js';
import { hostOps } from './ns/hostops.js';
import { mounter, stagingBase } from './ns/staging.js';

/** Directories under which an interpreter needs no extra bind (already in the root). */
const SYSTEM_PREFIXES = ['/usr/', '/bin/', '/sbin/', '/lib/', '/lib64/', '/lib32/', '/libx32/'];
export const SANDBOX_UID = 65534;
export const SANDBOX_GID = 65534;

export interface RootPlan {
  /** bwrap arguments building the root (before /in, /out, /tmp and scopes). */
  args: string[];
  /** PATH inside: interpreter bin dirs first (so `python3` is the host's python3), then the system's. */
  path: string[];
  /** Interpreter prefixes bound (host path inside -> where it was read from). */
  prefixes: { path: string; source: string }[];
}

/** Host /etc entries the sandbox's /etc copies (the dynamic loader's and the time zone). */
const HOST_ETC = ['/etc/ld.so.cache', '/etc/ld.so.conf', '/etc/localtime', '/etc/ld.so.conf.d', '/etc/alternatives'];

let etc: { dir: string; stamp: string } | null = null;

/** Modification times of the copied host entries: a change (a package install) means a new copy. */
function hostEtcStamp(): string {
  return HOST_ETC.map((p) => {
    try {
      return String(statSync(p).mtimeMs);
    } catch {
      return '-';
    }
  }).join(',');
}

/**
 * The sandbox's whole /etc, built once per process (again when the host's copied entries change) in a
 * fresh directory of the process's staging base (`home`: a tmpfs as root, removed with it when the
 * process exits, after a crash by the next sweep): generated passwd, group, hosts, nsswitch.conf,
 * plus copies of the loader's files and the time zone (symlinks in /etc/alternatives stay symlinks,
 * never followed). On a tmpfs: the ~400 symlinks of a Debian /etc/alternatives took 350-370 ms of every
 * one-shot command on this project's ext4 VM, a new inode each.
 */
function sandboxEtc(home: string): string {
  const stamp = hostEtcStamp();
  if (etc && etc.stamp === stamp && existsSync(etc.dir)) return etc.dir;
  if (etc) rmSync(dirname(etc.dir), { recursive: true, force: true });
  const base = mkdtempSync(join(home, 'etc-'));
  chmodSync(base, 0o755);
  const dir = join(base, 'etc');
  mkdirSync(dir, { mode: 0o755 });
  const files: Record<string, string> = {
    passwd: `root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nsandbox:x:${SANDBOX_UID}:${SANDBOX_GID}:airlock sandbox:/tmp:/usr/sbin/nologin\n`,
    group: `root:x:0:\nsandbox:x:${SANDBOX_GID}:\n`,
    hosts: '127.0.0.1 localhost\n::1 localhost\n',
    'nsswitch.conf': 'passwd: files\ngroup: files\nhosts: files\n',
  };
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text, { mode: 0o644 });
  for (const src of HOST_ETC) {
    if (!existsSync(src)) continue;
    const dest = join(dir, src.slice('/etc/'.length));
    if (statSync(src).isDirectory()) cpSync(src, dest, { recursive: true, verbatimSymlinks: true, dereference: false });
    else copyFileSync(src, dest); // localtime is a symlink into /usr/share/zoneinfo: its content is what counts
  }
  etc = { dir, stamp };
  return dir;
}

/** Can an unprivileged uid reach `p` (every ancestor searchable by "other")? */
export function reachableByOthers(p: string): boolean {
  let cur = dirname(p);
  for (;;) {
    try {
      if ((statSync(cur).mode & 0o001) === 0) return false;
    } catch {
      return false;
    }
    if (cur === '/') return true;
    cur = dirname(cur);
  }
}

const run = (file: string, args: string[]): Promise<{ code: number; stderr: string }> =>
  new Promise((resolve) => {
    execFile(file, args, { env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' }, timeout: 10_000 }, (err, _o, stderr) => {
      resolve({ code: err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0, stderr: String(stderr) });
    });
  });


/**
 * An interpreter prefix an unprivileged bwrap cannot reach (pyenv under /root, mode 0700) is bind-
 * mounted read-only by root at /run/airlock/mirror/<hash>, once per host boot, and bwrap binds that.
 * Only the prefix itself is exposed, never the rest of /root. Idempotent across processes.
 */
export async function mirrorPrefix(prefix: string, caps: HostCapabilities): Promise<string> {
  const hash = createHash('sha256').update(prefix).digest('hex').slice(0, 16);
  const target = `/run/airlock/mirror/${hash}`;
  const mounted = (readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => l.split(' ')[4] === target));
  if (mounted) return target;
  if (!caps.isRoot || !caps.mountBinary) throw new Error(`interpreter prefix ${prefix} is not reachable by the sandbox uid and we cannot mirror it (not root)`);
  mkdirSync(target, { recursive: true, mode: 0o755 });
  for (const d of ['/run/airlock', '/run/airlock/mirror']) chmodSync(d, 0o755);
  let r = await run(caps.mountBinary, ['--bind', prefix, target]);
  if (r.code !== 0) throw new Error(`cannot mirror ${prefix}: ${r.stderr.trim()}`);
  r = await run(caps.mountBinary, ['-o', 'remount,bind,ro,nosuid,nodev', target]);
  if (r.code !== 0) throw new Error(`cannot make the mirror of ${prefix} read-only: ${r.stderr.trim()}`);
  return target;
}

/** Build (and cache) the root plan: the same for every run of this process while the host's /etc entries stay. */
let planCache: Promise<RootPlan> | null = null;
let planStamp = '';
export function rootPlan(caps: HostCapabilities): Promise<RootPlan> {
  const stamp = hostEtcStamp();
  // A new host /etc, or our copy deleted under us (a /tmp cleaner): the plan names it, build again.
  if (stamp !== planStamp || (etc && !existsSync(etc.dir))) planCache = null;
  planStamp = stamp;
  if (!planCache) planCache = buildRootPlan(caps).catch((e) => {
    planCache = null;
    throw e;
  });
  return planCache;
}

async function buildRootPlan(caps: HostCapabilities): Promise<RootPlan> {
  const args: string[] = ['--ro-bind', '/usr', '/usr'];
  // /bin, /lib... are symlinks into /usr on merged-/usr hosts; otherwise bind them.
  for (const top of ['/bin', '/sbin', '/lib', '/lib64', '/lib32', '/libx32']) {
    let st;
    try {
      st = lstatSync(top);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) args.push('--symlink', readlinkSync(top), top);
    else if (st.isDirectory()) args.push('--ro-bind', top, top);
  }
  const home = await stagingBase(caps.isRoot ? mounter(caps, hostOps(caps.perlBinary)) : null, caps.isRoot ? caps.sandboxHostUser : null);
  args.push('--ro-bind', sandboxEtc(home), '/etc');
  const path: string[] = [];
  const prefixes: RootPlan['prefixes'] = [];
  for (const it of caps.interpreters) {
    const bin = dirname(it.executable);
    if (!SYSTEM_PREFIXES.some((p) => `${it.prefix}/`.startsWith(p))) {
      if (!prefixes.some((p) => p.path === it.prefix)) {
        const source = caps.isRoot && !reachableByOthers(it.prefix) ? await mirrorPrefix(it.prefix, caps) : it.prefix;
        args.push('--ro-bind', source, it.prefix);
        prefixes.push({ path: it.prefix, source });
      }
    }
    if (!path.includes(bin)) path.push(bin);
  }
  for (const p of ['/usr/local/bin', '/usr/bin', '/bin']) if (!path.includes(p)) path.push(p);
  args.push('--proc', '/proc', '--dev', '/dev');
  return { args, path, prefixes };
}

/** Resolve a bare argv[0] on the sandbox PATH (the bound paths are the same inside and out). */
export function resolveOnRoot(name: string, path: string[]): string | null {
  for (const dir of path) {
    const p = join(dir, name);
    try {
      const st = statSync(p);
      if (st.isFile() && (st.mode & 0o111) !== 0) return p;
    } catch {
      /* next */
    }
  }
  return null;
}
