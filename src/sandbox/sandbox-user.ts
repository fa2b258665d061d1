// The host user a root Airlock runs its sandboxes as. bwrap, the program and a Monty worker run as
// this uid on the host (uid 65534 inside), so whatever else runs as it can reach a live run's /out,
// scope overlays and processes. `airlock-sandbox`, a system user of Airlock's own made by
// `airlock setup --sandbox-user` (scripts/setup.sh runs it), when the host has one that nothing
// else shares; otherwise the host's `nobody`, which some systems give other services too, and
// `airlock doctor` says so with the fix.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { Problem } from '../base/problem.js';

export const SANDBOX_USER_NAME = 'airlock-sandbox';
const ABSENT = `the host has no ${SANDBOX_USER_NAME} user`;

export interface SandboxHostUser {
  name: string;
  uid: number;
  gid: number;
  /** True for Airlock's own user; false for the shared `nobody`. */
  dedicated: boolean;
  /** Why the dedicated user is not used (absent, or refused and why); absent when it is. */
  shared?: string;
}

interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
}

function parseDb(text: string): string[][] {
  return text.split('\n').filter((l) => l && !l.startsWith('#')).map((l) => l.split(':'));
}

function passwdEntries(passwd: string): PasswdEntry[] {
  return parseDb(passwd)
    .map((f) => ({ name: f[0] ?? '', uid: Number(f[2]), gid: Number(f[3]) }))
    .filter((e) => e.name && Number.isInteger(e.uid) && Number.isInteger(e.gid));
}

/** Why `u` may not be the sandbox's own user: it must share neither its uid nor its group with anyone. */
function notDedicated(u: PasswdEntry, users: PasswdEntry[], group: string): string | null {
  if (u.uid === 0 || u.gid === 0) return `${u.name} has uid ${u.uid} / gid ${u.gid}: root's ids`;
  if (u.uid === 65534) return `${u.name} has uid 65534, the host's nobody`;
  if (u.gid === 65534) return `${u.name} has gid 65534, the host's nogroup (services run as nobody:nogroup)`;
  const sameUid = users.filter((o) => o !== u && o.uid === u.uid).map((o) => o.name);
  if (sameUid.length) return `uid ${u.uid} of ${u.name} is also ${sameUid.join(', ')}`;
  const sameGroup = users.filter((o) => o !== u && o.gid === u.gid).map((o) => o.name);
  if (sameGroup.length) return `group ${u.gid} of ${u.name} is also the primary group of ${sameGroup.join(', ')}`;
  const groupDb = parseDb(group);
  // Every group line with that gid (a second name for it is another way in: a service set to it).
  const groups = groupDb.filter((f) => f[2] !== undefined && f[2] !== '' && Number(f[2]) === u.gid);
  if (groups.length > 1) return `group ${u.gid} of ${u.name} has ${groups.length} names: ${groups.map((f) => f[0]).join(', ')}`;
  const members = groups.flatMap((g) => (g[3] ?? '').split(',').filter(Boolean));
  if (members.length) return `group ${u.gid} of ${u.name} has members: ${members.join(', ')}`;
  // strace -u (the fallback tracer) gives the sandbox the user's supplementary groups.
  const alsoIn = groupDb.filter((f) => Number(f[2]) !== u.gid && (f[3] ?? '').split(',').includes(u.name)).map((f) => f[0]);
  if (alsoIn.length) return `${u.name} is also a member of ${alsoIn.join(', ')}`;
  return null;
}

/**
 * The sandbox's host user from the host's /etc/passwd and /etc/group texts: Airlock's own when it
 * is there and shares nothing, else `nobody` (uid 65534), else null (no user to run as).
 */
export function chooseSandboxUser(passwd: string, group: string): SandboxHostUser | null {
  const users = passwdEntries(passwd);
  const own = users.find((u) => u.name === SANDBOX_USER_NAME);
  const refused = own ? notDedicated(own, users, group) : null;
  if (own && !refused) return { name: own.name, uid: own.uid, gid: own.gid, dedicated: true };
  const nobody = users.find((u) => u.name === 'nobody' && u.uid === 65534);
  if (!nobody) return null;
  const shared = own ? `${SANDBOX_USER_NAME} is refused: ${refused}` : ABSENT;
  return { name: 'nobody', uid: 65534, gid: nobody.gid, dedicated: false, shared };
}

const readOr = (p: string): string => {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return '';
  }
};

/** This host's sandbox user (root only: otherwise the sandbox runs as the caller). */
export const hostSandboxUser = (): SandboxHostUser | null => chooseSandboxUser(readOr('/etc/passwd'), readOr('/etc/group'));

/**
 * `airlock setup --sandbox-user` (root): makes the system user `airlock-sandbox` with a group of its
 * own, no home and no login shell. Safe to run again: an existing user is checked, not changed.
 */
export function createSandboxUser(): { created: boolean; user: SandboxHostUser } | Problem {
  if (process.getuid?.() !== 0) return { code: 'SETUP_NOT_ROOT', message: `making a system user needs root: sudo airlock setup --sandbox-user` };
  let user = hostSandboxUser();
  if (user?.dedicated) return { created: false, user };
  if (user && user.shared !== ABSENT) {
    return { code: 'SETUP_SANDBOX_USER_SHARED', message: `${user.shared}. Give ${SANDBOX_USER_NAME} a uid and a group nothing else uses (or remove it and run this again); until then sandboxes run as nobody` };
  }
  try {
    execFileSync('useradd', ['--system', '--user-group', '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', '--comment', 'Airlock sandboxes', SANDBOX_USER_NAME], {
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
  } catch (e) {
    const err = e as { code?: string; stderr?: Buffer };
    const why = err.code === 'ENOENT' ? 'useradd is not installed (Debian: apt-get install passwd)' : `useradd failed: ${err.stderr?.toString().trim() || String(e)}`;
    return { code: 'SETUP_SANDBOX_USER_FAILED', message: `${why}; until it exists sandboxes run as the host's nobody` };
  }
  user = hostSandboxUser();
  if (!user?.dedicated) return { code: 'SETUP_SANDBOX_USER_FAILED', message: `useradd returned, but ${user?.shared ?? 'no sandbox user is found'}` };
  return { created: true, user };
}
