import { lstatSync, readFileSync } from 'node:fs';
import type { Action } from '../action/action.js';
import { actionsOf } from '../action/declaration.js';
import type { Problem } from '../base/problem.js';

/**
 * Preconditions are checked again at promotion, on the real host (the sandbox saw none of them).
 * A boolean precondition that is false asks for nothing ("not required"); true is a requirement.
 *
 * - paths_exist: each path exists (lstat: a dangling link counts as existing, nothing is followed).
 * - network_available: a default route (IPv4 or IPv6) through an interface other than `lo`.
 * - user_idle: a server has no trustworthy idle source (no seat, no input devices Airlock may
 *   read), so `true` is refused as uncheckable rather than guessed.
 */
export interface HostProbe {
  defaultRoute(): boolean;
  /** null: this host cannot tell. */
  userIdle(): boolean | null;
}

export const realHost: HostProbe = {
  defaultRoute() {
    const read = (f: string) => {
      try {
        return readFileSync(f, 'utf8').split('\n');
      } catch {
        return [];
      }
    };
    const v4 = read('/proc/net/route').slice(1).some((l) => {
      const [iface, dest, , flags] = l.trim().split(/\s+/);
      return iface !== undefined && iface !== 'lo' && dest === '00000000' && (parseInt(flags ?? '0', 16) & 1) === 1;
    });
    const v6 = read('/proc/net/ipv6_route').some((l) => {
      const f = l.trim().split(/\s+/);
      return f.length >= 10 && f[0] === '0'.repeat(32) && f[1] === '00' && f[9] !== 'lo' && (parseInt(f[8] ?? '0', 16) & 1) === 1;
    });
    return v4 || v6;
  },
  userIdle: () => null,
};

/** lstat only: a dangling link counts as existing; nothing is opened or followed. */
function exists(p: string): boolean {
  try {
    lstatSync(p);
    return true;
  } catch {
    return false;
  }
}

/** Every precondition of the action and of its steps. */
export function checkPreconditions(action: Action, host: HostProbe = realHost): Problem[] {
  const problems: Problem[] = [];
  for (const x of actionsOf(action)) {
    const pre = x.preconditions;
    for (const p of pre.pathsExist) {
      if (!exists(p)) problems.push({ code: 'PROMOTE_PRECONDITION_FAILED', message: `precondition paths_exist: ${p} does not exist`, path: p });
    }
    if (pre.networkAvailable && !host.defaultRoute()) {
      problems.push({ code: 'PROMOTE_PRECONDITION_FAILED', message: 'precondition network_available: this host has no default route', path: 'preconditions.network_available' });
    }
    if (pre.userIdle) {
      const idle = host.userIdle();
      if (idle === null) problems.push({ code: 'PROMOTE_PRECONDITION_UNCHECKABLE', message: 'precondition user_idle: true cannot be checked on this host (no session idle source); nothing was applied', path: 'preconditions.user_idle' });
      else if (!idle) problems.push({ code: 'PROMOTE_PRECONDITION_FAILED', message: 'precondition user_idle: the user is not idle', path: 'preconditions.user_idle' });
    }
  }
  return problems;
}
