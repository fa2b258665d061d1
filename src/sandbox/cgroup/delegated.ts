// Cgroups without root: the subtree a non-root user may create run groups in.
//
// cgroup v1: root delegates once, per controller hierarchy, a folder the user owns
// (<mount>/airlock-<user>, made by `airlock setup --delegate USER`, setup.ts). The kernel lets the user
// mkdir groups below it and move their own processes (same uid) into them from anywhere.
// cgroup v2: the kernel's delegation rules are stricter: a process may be moved only by a writer of
// the cgroup.procs of the common ancestor of its source and destination. So the subtree must already
// hold this process: a systemd scope with Delegate=yes (`systemd-run --user --scope -p Delegate=yes`)
// or the folder root delegated with the user's session moved into it. We use the topmost folder we
// own that contains us.
import { accessSync, constants, statSync } from 'node:fs';
import { join } from 'node:path';
import type { CgroupController, CgroupInfo } from './types.js';
import { readOr } from './util.js';

/** v1 controllers a delegation covers (cpu is not used by runs: cpuacct accounts, the host kills). */
export const V1_DELEGATED: readonly CgroupController[] = ['memory', 'pids', 'cpuacct', 'freezer'];

/** The folder root delegates to `user` in each hierarchy. */
export const delegatedName = (user: string): string => `airlock-${user}`;

/** The one command that makes limits enforceable for `user` (run by root). */
export const delegateCommand = (user: string): string => `airlock setup --delegate ${user}`;

/** v2: the leaf the delegated subtree's own processes (this one) move into, so that its children can get controllers. */
export const HOST_LEAF = 'airlock-host';

/** `path` (a folder, or with `file` a file) is owned by uid and writable by us. */
function ownedWritable(path: string, uid: number, file = false): boolean {
  try {
    const st = statSync(path);
    if ((file ? !st.isFile() : !st.isDirectory()) || st.uid !== uid) return false;
    accessSync(path, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

const notUsable = (version: 1 | 2, mounts: Record<string, string>, controllers: CgroupController[], detail: string, fix: string): CgroupInfo => ({
  version,
  controllers,
  mounts,
  swapAccounting: false,
  usable: false,
  bases: {},
  delegation: null,
  detail,
  fix,
});

/** v1, not root: the per-controller folders delegated to this user. */
export function delegatedV1(mounts: Record<string, string>, user: string, uid: number): CgroupInfo {
  const bases: Record<string, string> = {};
  for (const c of V1_DELEGATED) {
    const m = mounts[c];
    if (m && ownedWritable(join(m, delegatedName(user)), uid)) bases[c] = join(m, delegatedName(user));
  }
  const controllers = Object.keys(bases) as CgroupController[];
  const mounted = V1_DELEGATED.filter((c) => mounts[c]);
  if (controllers.length === 0) {
    return notUsable(1, mounts, mounted, `cgroup v1 (${mounted.join(', ')}), nothing delegated to ${user} (no ${delegatedName(user)} folder owned by uid ${uid})`, `as root: ${delegateCommand(user)}`);
  }
  const missing = mounted.filter((c) => !bases[c]);
  const mem = bases.memory;
  return {
    version: 1,
    controllers,
    mounts,
    swapAccounting: mem !== undefined && readOr(join(mem, 'memory.memsw.limit_in_bytes')) !== null,
    usable: true,
    bases,
    delegation: { kind: 'delegated', user, via: `cgroup v1 folders ${delegatedName(user)} delegated by root` },
    detail: `cgroup v1 delegated to ${user} (${controllers.join(', ')})${missing.length ? `; not delegated: ${missing.join(', ')}` : ''}`,
    ...(missing.length ? { fix: `as root: ${delegateCommand(user)}` } : {}),
  };
}

/** The cgroup v2 path of this process from /proc/self/cgroup ("0::/path"), or null. */
export function ownV2Path(procSelfCgroup: string): string | null {
  const m = /^0::(\/.*)$/m.exec(procSelfCgroup);
  if (!m?.[1] || m[1].split('/').includes('..') || m[1].endsWith(' (deleted)')) return null;
  return m[1];
}

/** v2, not root: the topmost folder this user owns that holds this process. */
export function delegatedV2(unified: string, user: string, uid: number, procSelfCgroup: string): CgroupInfo {
  const own = ownV2Path(procSelfCgroup);
  let base: string | null = null;
  if (own) {
    const parts = own.split('/').filter(Boolean);
    // Walk down from the root: the first folder we own on our own path is the delegated subtree.
    for (let i = 1; i <= parts.length; i++) {
      const dir = join(unified, ...parts.slice(0, i));
      if (ownedWritable(dir, uid) && ownedWritable(join(dir, 'cgroup.procs'), uid, true)) {
        base = dir;
        break;
      }
    }
  }
  const rootDelegated = join(unified, delegatedName(user));
  const fix =
    `cgroup v2 lets a user move processes only inside a subtree that already holds them: start Airlock in a delegated systemd scope ` +
    `(systemd-run --user --scope -p Delegate=yes -- airlock ...), or as root run \`${delegateCommand(user)}\` and move the user's session into ${rootDelegated}`;
  if (!base) {
    const why = ownedWritable(rootDelegated, uid) ? `${rootDelegated} is delegated to ${user} but this process (${own ?? 'unknown cgroup'}) is outside it` : `no cgroup v2 subtree delegated to ${user} holds this process (${own ?? 'unknown cgroup'})`;
    return notUsable(2, { unified }, [], `cgroup v2 at ${unified}: ${why}`, fix);
  }
  const ctrls = (readOr(join(base, 'cgroup.controllers')) ?? '').trim().split(/\s+/);
  const controllers = ctrls.filter((c): c is CgroupController => c === 'memory' || c === 'pids' || c === 'cpu');
  if (controllers.length === 0) return notUsable(2, { unified }, [], `cgroup v2 subtree ${base} is ours but its parent gives it no memory, pids or cpu controller`, fix);
  return {
    version: 2,
    controllers,
    mounts: { unified },
    swapAccounting: controllers.includes('memory'),
    usable: true,
    bases: { unified: base },
    delegation: { kind: 'delegated', user, via: `cgroup v2 subtree ${base} owned by ${user}` },
    detail: `cgroup v2 subtree ${base} delegated to ${user} (${controllers.join(', ')})`,
  };
}
