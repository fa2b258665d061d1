import { randomUUID } from 'node:crypto';
import { isAbsolute, normalize } from 'node:path';
import type { Problem } from '../base/problem.js';
import { parseAllowEntry } from '../base/allowlist.js';
import { NO_PRECONDITIONS, type Action, type ActionInput, type ActionLimits } from './action.js';

/**
 * `airlock exec -- CMD ARGS...` as an Action: a command line, the host paths it may see (read-only)
 * or change (writable, through the copy-on-write overlay: the real folder changes only on promote),
 * where it may connect, and its limits. The person at the terminal states all of it, so it is
 * declared exactly: writable folders are the only places (with /out) where changes are expected.
 */
export interface ArgvRequest {
  argv: string[];
  /** Absolute host paths the program sees read-only. */
  readOnly: string[];
  /** Absolute host directories the program may change (through the overlay). */
  writable: string[];
  /** Allowlist entries (`host`, `host:port`, `*.host:443`...; docs/network.md). */
  net: string[];
  /** Files copied into /in (by name, hashed by the caller when staged). */
  inputs: ActionInput[];
  limits: ActionLimits;
  /** Working directory inside the sandbox; default /tmp. */
  cwd?: string;
}

const isNormalAbsolute = (p: string): boolean => isAbsolute(p) && normalize(p) === p && p !== '/' && !p.endsWith('/');
const overlaps = (a: string, b: string): boolean => a === b || a.startsWith(`${b}/`) || b.startsWith(`${a}/`);

export function actionFromArgv(r: ArgvRequest): Action | { problems: Problem[] } {
  const problems: Problem[] = [];
  if (r.argv.length === 0 || r.argv[0] === '') problems.push({ code: 'EXEC_NO_COMMAND', message: 'no command to run: give it after `--` (airlock exec [options] -- CMD ARGS...)', path: 'argv' });
  const paths = [...r.readOnly.map((p) => ['--ro', p] as const), ...r.writable.map((p) => ['--rw', p] as const)];
  for (const [i, [flag, p]] of paths.entries()) {
    if (!isNormalAbsolute(p)) {
      problems.push({ code: 'EXEC_PATH', message: `${flag} ${p}: give an absolute path without a trailing slash, "." or ".." (and not / itself)`, path: flag });
      continue;
    }
    const other = paths.slice(i + 1).find(([, q]) => overlaps(p, q));
    if (other) problems.push({ code: 'EXEC_PATH_OVERLAP', message: `${flag} ${p} and ${other[0]} ${other[1]} overlap: name each folder once, the outer one only`, path: flag });
  }
  for (const entry of r.net) {
    const parsed = parseAllowEntry(entry, '--net');
    if ('problem' in parsed) problems.push(parsed.problem);
  }
  if (problems.length > 0) return { problems };
  const changes = r.writable.map((d) => `${d}/**`);
  const network = r.net.length > 0;
  return {
    id: randomUUID(),
    source: 'argv',
    kind: 'COMMAND_EXECUTION',
    lane: 'ns',
    run: { kind: 'argv', argv: r.argv },
    inputs: r.inputs,
    outputsExpected: [],
    scope: { paths: [...r.writable, ...r.readOnly], recursive: true, readOnly: r.readOnly },
    effects: { create: changes, modify: changes, delete: changes, anyChangeIn: r.writable, network, systemStateChange: false },
    limits: r.limits,
    network: network ? { mode: 'allowlist', allowlist: r.net } : { mode: 'none', allowlist: [] },
    // Changing host folders or reaching the network is more than pure computation.
    risk: r.writable.length > 0 || network ? 'MEDIUM' : 'LOW',
    confirmationRequired: false,
    rollbackSupported: true,
    sandboxRequired: true,
    preconditions: NO_PRECONDITIONS,
    cooldownOnRepeat: false,
    ...(r.cwd ? { cwd: r.cwd } : {}),
    display: r.argv.join(' ').slice(0, 200),
  };
}
