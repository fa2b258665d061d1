// `airlock setup --delegate USER` (root, once): give a user a cgroup subtree of their own, so that
// their runs' limits are enforced by the kernel without root (delegated.ts reads it back).
//   v1: per controller hierarchy (memory, pids, cpuacct, freezer), <mount>/airlock-USER owned by the
//       user: they create a group per run below it and move their own sandbox into it.
//   v2: <mount>/airlock-USER with the controllers enabled for it, the folder and its cgroup.procs,
//       cgroup.subtree_control and cgroup.threads owned by the user (the kernel's delegation rules).
//       The user's processes must be moved into it (or use a systemd scope): said in the notes.
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Problem } from '../../base/problem.js';
import { delegatedName, V1_DELEGATED } from './delegated.js';
import { parseCgroupMounts } from './index.js';
import { pidsIn, readOr, removeGroup, write } from './util.js';

export interface HostUser {
  name: string;
  uid: number;
  gid: number;
}

export interface DelegationReport {
  version: 1 | 2;
  /** The folders made (or found) and handed to the user. */
  dirs: string[];
  notes: string[];
}

const NAME = /^[a-z_][a-z0-9_.-]{0,31}\$?$/i;

/** The user's uid and primary gid from the system's user database (getent: files, LDAP, ...). */
export function lookupUser(name: string): HostUser | Problem {
  if (!NAME.test(name)) return { code: 'SETUP_BAD_USER', message: `"${name.slice(0, 40)}" is not a user name` };
  try {
    const line = execFileSync('getent', ['passwd', name], { encoding: 'utf8', env: { PATH: '/usr/bin:/bin' } }).trim();
    const f = line.split(':');
    const uid = Number(f[2]);
    const gid = Number(f[3]);
    if (f[0] !== name || !Number.isInteger(uid) || !Number.isInteger(gid)) throw new Error('bad entry');
    return { name, uid, gid };
  } catch {
    return { code: 'SETUP_UNKNOWN_USER', message: `no user "${name}" on this host (getent passwd ${name} found nothing)` };
  }
}

function hierarchies(): { version: 1 | 2; dirs: Record<string, string> } | null {
  const { v1, v2 } = parseCgroupMounts(readOr('/proc/self/mountinfo') ?? '');
  for (const m of v2) if ((readOr(join(m, 'cgroup.controllers')) ?? '').split(/\s+/).some((c) => c === 'memory' || c === 'pids' || c === 'cpu')) return { version: 2, dirs: { unified: m } };
  const dirs: Record<string, string> = {};
  for (const c of V1_DELEGATED) if (v1[c]) dirs[c] = v1[c];
  return Object.keys(dirs).length ? { version: 1, dirs } : null;
}

/** Create (or repair) the user's delegated subtree. Root only. */
export function delegate(user: HostUser): DelegationReport | Problem {
  if (process.getuid?.() !== 0) return { code: 'SETUP_NOT_ROOT', message: `delegating a cgroup subtree needs root: sudo airlock setup --delegate ${user.name}` };
  if (user.uid === 0) return { code: 'SETUP_BAD_USER', message: 'root needs no delegation' };
  const h = hierarchies();
  if (!h) return { code: 'SETUP_NO_CGROUPS', message: 'no cgroup hierarchy with memory, pids or cpu accounting is mounted on this host' };
  const dirs: string[] = [];
  const notes: string[] = [];
  try {
    if (h.version === 1) {
      for (const [c, m] of Object.entries(h.dirs)) {
        const dir = join(m, delegatedName(user.name));
        if (!existsSync(dir)) mkdirSync(dir, { mode: 0o755 });
        // The folder (to create run groups) and its task files (harmless, lets the user move in).
        for (const f of ['', 'cgroup.procs', 'tasks']) chownSync(join(dir, f), user.uid, user.gid);
        // Children count against a parent's memory limit only with hierarchy on (default on new kernels).
        if (c === 'memory' && existsSync(join(dir, 'memory.use_hierarchy')) && (readOr(join(dir, 'memory.use_hierarchy')) ?? '').trim() !== '1') {
          try {
            write(join(dir, 'memory.use_hierarchy'), '1');
          } catch {
            notes.push('memory.use_hierarchy could not be set to 1 (runs still get their own limits)');
          }
        }
        dirs.push(dir);
      }
      notes.push(`${user.name}'s runs create one group per run below these folders; nothing else changes for other users`);
    } else {
      const m = h.dirs.unified!;
      const dir = join(m, delegatedName(user.name));
      const ctrls = (readOr(join(m, 'cgroup.controllers')) ?? '').trim().split(/\s+/).filter((c) => c === 'memory' || c === 'pids' || c === 'cpu');
      if (ctrls.length) write(join(m, 'cgroup.subtree_control'), ctrls.map((c) => `+${c}`).join(' '));
      if (!existsSync(dir)) mkdirSync(dir, { mode: 0o755 });
      for (const f of ['', 'cgroup.procs', 'cgroup.subtree_control', 'cgroup.threads']) chownSync(join(dir, f), user.uid, user.gid);
      dirs.push(dir);
      notes.push(
        `cgroup v2 lets ${user.name} move processes only within a subtree that already holds them: move their session in ` +
          `(as root: echo <pid of their shell> > ${join(dir, 'cgroup.procs')}), or let them use a systemd scope instead ` +
          `(systemd-run --user --scope -p Delegate=yes -- airlock ...), which needs no setup`,
      );
    }
  } catch (e) {
    return { code: 'SETUP_DELEGATE_FAILED', message: `delegating to ${user.name} failed: ${(e as Error).message}` };
  }
  return { version: h.version, dirs, notes };
}

/** Remove the user's delegated subtree (their run groups' processes killed first). Root only. */
export async function undelegate(userName: string): Promise<{ removed: string[]; errors: string[] } | Problem> {
  if (process.getuid?.() !== 0) return { code: 'SETUP_NOT_ROOT', message: `removing a delegation needs root: sudo airlock setup --undelegate ${userName}` };
  if (!NAME.test(userName)) return { code: 'SETUP_BAD_USER', message: `"${userName.slice(0, 40)}" is not a user name` };
  const h = hierarchies();
  const removed: string[] = [];
  const errors: string[] = [];
  const { v1 } = parseCgroupMounts(readOr('/proc/self/mountinfo') ?? '');
  const mounts = h?.version === 2 ? Object.values(h.dirs) : Object.values(v1);
  for (const m of new Set(mounts)) {
    const dir = join(m, delegatedName(userName));
    if (!existsSync(dir)) continue;
    const left = pidsIn(dir);
    if (left.length > 0) {
      errors.push(`${dir} still holds processes (${left.slice(0, 5).join(', ')}): move them out first (the user's own session is never killed)`);
      continue;
    }
    const err = await removeTree(dir);
    if (err) errors.push(err);
    else removed.push(dir);
  }
  return { removed, errors };
}

/** Depth first: kill each group's tasks (run groups: sandbox processes), then rmdir it. */
async function removeTree(dir: string): Promise<string | null> {
  for (const e of readdirSync(dir)) {
    const child = join(dir, e);
    try {
      if (!statSync(child).isDirectory()) continue;
    } catch {
      continue;
    }
    const err = await removeTree(child);
    if (err) return err;
  }
  for (const p of pidsIn(dir)) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  return removeGroup(dir);
}
