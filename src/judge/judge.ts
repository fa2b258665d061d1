import { deletionDeclared, globWithin, pathMatches } from '../base/globs.js';
import type { Action } from '../action/action.js';
import { sensitivePath } from '../base/sensitive-paths.js';
import { privilegeBits } from '../base/mode.js';
import { PROXY_HOST, PROXY_PORT } from '../sandbox/egress/forwarder.js';
import { refusedLines, type NetworkObservation } from '../sandbox/egress/records.js';
import type { FsChange, Observation, ObservedSideEffects } from '../sandbox/types.js';

export type Verdict = 'PROMOTE' | 'REQUIRE_CONFIRMATION' | 'BLOCK' | 'FORCE_ROLLBACK';

/**
 * Codes of the judge's reasons about what the observer could not see or refused (a reason starts
 * with its code and a colon). Each: what it means, and what to do about it.
 */
export const JUDGE_REASON_CODES = {
  JG_UNREADABLE_ARGUMENT: {
    verdict: 'BLOCK',
    meaning: 'the program made observed system calls whose arguments (path, socket address) the host could not read, or a path the host could not follow to where it leads (longer than 8 KiB once its links are resolved, more than 256 folders to open, or relative to a folder whose name is longer than a path can be): what they named is unknown, so the run was not fully observed',
    fix: 'keep paths and addresses in ordinary memory, and links few and short; a program that hides them from the host is not run',
  },
  JG_SYSCALL_REFUSED: {
    verdict: 'REQUIRE_CONFIRMATION',
    meaning: "the program called system calls outside the sandbox's allowlist; they were refused (ENOSYS) and changed nothing",
    fix: 'if an ordinary program needs one, add it to ALLOWED_SYSCALLS (docs/seccomp.md, "Extending the list")',
  },
  JG_SENSITIVE_PATH: {
    verdict: 'REQUIRE_CONFIRMATION',
    meaning: 'the run changed a file that acts later outside any sandbox: a credential, a shell start-up file, an autostart entry, a git hook or config',
    fix: 'look at the change (airlock show SANDBOX_ID) before confirming it; declare narrower writable folders',
  },
  JG_ANONYMOUS_EXEC: {
    verdict: 'REQUIRE_CONFIRMATION',
    meaning: 'the program ran code from a file with no name in any filesystem (memfd_create + fexecve, a deleted file): nobody can look at what ran',
    fix: 'run programs from files; a person confirms a run that executed anonymous code',
  },
  JG_SCRATCH_UNOBSERVED: {
    verdict: 'BLOCK',
    meaning: "the host could not look at everything the program left in /dev/shm (entries it could not read, such as a chain of folders deeper than a path can name, or the count stopped at the file cap or the observation deadline): the run was not fully observed",
    fix: 'leave /dev/shm as an ordinary program does (a few files, removed at the end); a program that hides what it left from the host is not promoted',
  },
  JG_SHARED_UID: {
    verdict: 'none',
    meaning: "a note that changes no verdict: the run may write a scope that could not be seen through an idmapped mount (a kernel before 5.19, a filesystem such as NFS, FUSE or ramfs, or Airlock built without airlock-idmap), so it ran with the sandbox user's uid (a gid of its own), which every such run shares: an escape from one could reach another",
    fix: 'keep writable scopes on a filesystem with idmapped mounts (ext4, xfs, btrfs, tmpfs); `airlock doctor` says whether TMPDIR\'s has them',
  },
} as const;
export type JudgeReasonCode = keyof typeof JUDGE_REASON_CODES;
const coded = (code: JudgeReasonCode, text: string): string => `${code}: ${text}`;

export interface Compliance {
  effects_within_declaration: boolean;
  resources_within_limits: boolean;
  within_scope: boolean;
  sandbox_requirements_met: boolean;
  rollback_possible: boolean;
  no_privileged_syscalls: boolean;
  no_device_access: boolean;
  no_undeclared_network: boolean;
}

export interface Judgement {
  compliance: Compliance;
  verdict: Verdict;
  /** Why the verdict is what it is: one line per finding, most serious first. */
  reasons: string[];
  /** What the program did that was not expected (for the Tool Result's Safety Notes). */
  unexpected: string[];
}

/**
 * Network attempts that name a destination (address and port, or a unix socket path). With the
 * network (`network` given), connections to the host proxy's endpoint are the proxy's business: its
 * own record says where they went; every other attempt went around it.
 */
export function networkAttempts(se: ObservedSideEffects, network?: NetworkObservation): ObservedSideEffects['networkAttempts'] {
  const toProxy = (n: ObservedSideEffects['networkAttempts'][number]): boolean =>
    network !== undefined && n.protocol === 'tcp' && n.port === PROXY_PORT && (n.address === PROXY_HOST || n.address === `::ffff:${PROXY_HOST}`);
  return se.networkAttempts.filter((n) => (n.path !== null || (n.address !== null && n.port !== null)) && !toProxy(n));
}

const SPECIAL_TYPES = new Set(['symlink', 'hardlink', 'fifo', 'socket', 'char-device', 'block-device']);

/** Which declared effect list covers a change of this kind. */
function declaredFor(action: Action, c: FsChange): string[] {
  if (c.change === 'added') return action.effects.create;
  if (c.change === 'modified') return action.effects.modify;
  return action.effects.delete;
}

/** Directories created implicitly as parents of a declared output are part of that output; a declared directory deletion covers its contents. */
function coveredByDeclaration(action: Action, c: FsChange, deleted: ReadonlySet<string>): boolean {
  const list = declaredFor(action, c);
  // `airlock exec --rw DIR`: any change under DIR, dot-names (.git, .cache) included, is declared.
  if ((action.effects.anyChangeIn ?? []).some((d) => c.path.startsWith(`${d}/`))) return true;
  if (c.change === 'deleted') return deletionDeclared(list, c.path, deleted);
  if (list.some((g) => pathMatches(g, c.path))) return true;
  if (c.type === 'dir' && c.change === 'added') return action.effects.create.some((g) => g.startsWith(c.path + '/'));
  return false;
}

function withinScope(action: Action, c: FsChange): boolean {
  if (c.path === '/out' || c.path.startsWith('/out/')) return action.source !== 'action-descriptor';
  // Non-recursive: the path itself and its direct children, as the descriptor's validator reads it.
  return action.scope.paths.some((p) => globWithin({ pattern: p, mode: action.scope.recursive ? 'subtree' : 'children' }, c.path));
}

/**
 * Compares what was observed with what was declared (sandbox-result.schema.md §10-§13).
 * Every hard failure of §13 is a BLOCK; any false compliance forbids PROMOTE; the host policy may
 * still tighten the verdict afterwards.
 */
export function judge(action: Action, obs: Observation): Judgement {
  const hard: string[] = [];
  const soft: string[] = [];
  const unexpected: string[] = [];

  // Filesystem: every change declared and inside the scope; special files are never trusted.
  const outChanges = obs.fs.out;
  const scopeChanges = obs.fs.scopes.map((s) => s.changes);
  const diffVerifiable = outChanges !== null && scopeChanges.every((c) => c !== null);
  if (!diffVerifiable) {
    hard.push(`filesystem diff cannot be verified: ${[obs.fs.outError, ...obs.fs.scopes.map((s) => s.error)].filter(Boolean).join('; ') || 'diff missing'}`);
  }
  const changes = [...(outChanges ?? []), ...scopeChanges.flatMap((c) => c ?? [])];
  let effectsOk = diffVerifiable;
  let unrestorable = false;
  let scopeOk = diffVerifiable;
  const deleted = new Set(changes.filter((c) => c.change === 'deleted').map((c) => c.path));
  for (const c of changes) {
    if (!withinScope(action, c)) {
      scopeOk = false;
      hard.push(`${c.change} ${c.path} is outside the declared scope`);
    } else if (!coveredByDeclaration(action, c, deleted)) {
      effectsOk = false;
      hard.push(`undeclared filesystem effect: ${c.change} ${c.path}`);
    }
    // eslint-disable-next-line no-control-regex
    if (/[\u0000-\u001f\u007f]/.test(c.path) || c.path.length > 4096) {
      scopeOk = false;
      const shown = JSON.stringify(c.path.slice(0, 300));
      hard.push(`${shown} ${c.path.length > 4096 ? `is a path of ${c.path.length} characters` : 'has control characters in its name'}: such a file is never accepted`);
      unexpected.push(`created a file whose name cannot be shown as is: ${shown}`);
    }
    if (SPECIAL_TYPES.has(c.type)) {
      scopeOk = false;
      const target = c.linkTarget ? ` -> ${c.linkTarget}` : c.hardlinkOf?.length ? ` (same inode as ${c.hardlinkOf.join(', ')})` : c.nlink && c.nlink > 1 ? ` (nlink ${c.nlink})` : '';
      hard.push(`FS_SPECIAL_FILE: ${c.path} is a ${c.type}${target}: special files are not accepted as outputs`);
      unexpected.push(`created a ${c.type} at ${c.path}${target}`);
    }
    // No privilege comes out of a sandbox: a set-id or sticky bit is never accepted, whatever declared it.
    if (c.change !== 'deleted' && c.mode & 0o7000) {
      scopeOk = false;
      const bits = privilegeBits(c.mode);
      hard.push(`FS_PRIVILEGE_BITS: ${c.path} has mode ${(c.mode & 0o7777).toString(8).padStart(4, '0')} (${bits}): never accepted`);
      unexpected.push(`set ${bits} bits on ${c.path}`);
    }
    // Nor is an entry changed that a rollback could not give back: its old mode has such a bit, and
    // Airlock never writes one (a set-gid file written to loses it; a sticky folder deleted).
    const before = c.change === 'deleted' ? c.mode : c.change === 'modified' ? (c.modeBefore ?? 0) : 0;
    if (before & 0o7000) {
      unrestorable = true;
      hard.push(`FS_UNRESTORABLE_MODE: ${c.change} ${c.path}, whose mode was ${(before & 0o7777).toString(8).padStart(4, '0')} (${privilegeBits(before)}): a rollback could not write that back (Airlock never writes set-uid, set-gid or sticky bits)`);
    }
  }
  // Declared or not, a change that acts later outside the sandbox needs a person.
  const sensitive = changes.flatMap((c) => {
    const why = sensitivePath(c.path);
    return why ? [`${c.change} ${c.path} (${why})`] : [];
  });
  if (sensitive.length > 0) soft.push(coded('JG_SENSITIVE_PATH', `${sensitive.slice(0, 3).join('; ')}${sensitive.length > 3 ? `; and ${sensitive.length - 3} more` : ''}`));
  // Promotion writes with the scope owner's authority: it cannot (and must not) change another owner's files.
  for (const s of obs.fs.scopes) {
    for (const c of s.changes ?? []) {
      if (c.change === 'added' || c.uidBefore === undefined || c.uidBefore === s.root.uid) continue;
      scopeOk = false;
      hard.push(`FS_FOREIGN_OWNER: ${c.change} ${c.path}, owned by uid ${c.uidBefore}, not by the scope's owner (uid ${s.root.uid})`);
    }
  }

  // Resources: within limits only when measured (an unmeasured figure proves nothing).
  const r = obs.resources;
  const unmeasured = (['cpuUserMs', 'cpuSystemMs', 'peakMemoryBytes', 'diskWriteBytes', 'wallMs'] as const).filter((k) => r[k] === null);
  const exceeded = obs.limitsExceeded.length > 0 || obs.status === 'TIMEOUT' || obs.status === 'RESOURCE_KILLED';
  let resourcesOk = unmeasured.length === 0 && !exceeded;
  if (unmeasured.length > 0 && obs.status !== 'SANDBOX_ERROR') {
    // The host's own reasons (e.g. no cgroup delegated to this user, and the command that fixes it).
    const why = [...new Set(unmeasured.map((k) => r.unmeasured[k]).filter((w): w is string => typeof w === 'string'))];
    hard.push(`resource use could not be measured: ${unmeasured.join(', ')}${why.length ? ` (${why.join('; ')})` : ''}`);
  }
  // A limit reached is said even where other figures could not be measured, or the sandbox failed.
  if (exceeded) {
    const which = obs.limitsExceeded.length > 0 ? obs.limitsExceeded.join(', ') : obs.status === 'TIMEOUT' ? 'wallMs' : 'a resource limit';
    hard.push(`resource limits exceeded (${which}): ${obs.reason}`);
    unexpected.push(`exceeded its limits (${which})`);
  }

  // Side effects: privileged syscalls and device access must always be absent (§9).
  const se = obs.sideEffects;
  let privOk = se !== null;
  let devOk = se !== null;
  let netOk = se !== null;
  let observedFully = true;
  if (se === null) {
    hard.push(`side effects could not be observed: ${obs.sideEffectsUnavailable ?? 'no syscall trace'}`);
  } else {
    if (se.privilegedSyscalls.length > 0) {
      privOk = false;
      const list = se.privilegedSyscalls.map((p) => `${p.name} x${p.count} (${p.outcome})`).join(', ');
      hard.push(`privileged system calls attempted: ${list}`);
      unexpected.push(`attempted privileged system calls: ${list}`);
    }
    // What the observer could not read is a finding, never a gap: the run was not fully observed.
    const unreadable = se.unreadableSyscalls ?? [];
    if (unreadable.length > 0) {
      observedFully = false;
      const list = unreadable.map((u) => `${u.syscall} x${u.count}`).join(', ');
      hard.push(coded('JG_UNREADABLE_ARGUMENT', `system calls whose arguments the host could not read or follow: ${list}`));
      unexpected.push(`hid the arguments of system calls from the host: ${list}`);
    }
    const refusedCalls = se.refusedSyscalls ?? [];
    if (refusedCalls.length > 0) {
      const list = refusedCalls.map((r) => `${r.name} x${r.count}`).join(', ');
      soft.push(coded('JG_SYSCALL_REFUSED', `system calls outside the sandbox's allowlist were refused: ${list}`));
      unexpected.push(`called system calls outside the allowlist (refused): ${list}`);
    }
    const anonymous = se.processesSpawned.executables.filter((e) => e.anonymous);
    if (anonymous.length > 0) {
      const list = anonymous.map((e) => `${e.path} x${e.count}`).join(', ');
      soft.push(coded('JG_ANONYMOUS_EXEC', `ran code from files with no name (nobody can look at it): ${list}`));
      unexpected.push(`executed anonymous files: ${list}`);
    }
    if (se.deviceAccess.length > 0) {
      devOk = false;
      const list = [...new Set(se.deviceAccess.map((d) => `${d.path} (${d.result})`))].join(', ');
      hard.push(`device access attempted: ${list}`);
      unexpected.push(`attempted to open devices: ${list}`);
    }
    // Refused file accesses change nothing, but a program that tries them is not doing only its job:
    // a person should look before anything it produced is used.
    const refused = (access: 'read' | 'write') =>
      [...new Set(se.fileAccess.filter((a) => a.access === access).map((a) => {
        const how = [a.asWritten !== undefined ? `as ${a.asWritten}` : '', a.result && a.result !== 'ok' ? a.result : ''].filter(Boolean).join(', ');
        return how ? `${a.path} (${how})` : a.path;
      }))];
    const listed = (xs: string[]) => xs.slice(0, 20).join(', ') + (xs.length > 20 ? `, and ${xs.length - 20} more` : '');
    const writes = refused('write');
    const reads = refused('read');
    if (writes.length > 0) {
      soft.push(`writes outside /out, /tmp and the declared scope were attempted: ${listed(writes)}`);
      unexpected.push(`tried to write outside its writable areas: ${listed(writes)}`);
    }
    if (reads.length > 0) {
      soft.push(`reads of host-secret paths were attempted (they are not in the sandbox): ${listed(reads)}`);
      unexpected.push(`tried to read host-secret paths: ${listed(reads)}`);
    }
    // A socket() alone reaches nothing: an attempt is a connect/send/bind with a destination.
    const attempts = networkAttempts(se, obs.network);
    if (attempts.length > 0) {
      const list = [...new Set(attempts.map((n) => `${n.protocol ?? n.family} ${n.path ?? `${n.address}:${n.port}`} (${n.result})`))].join(', ');
      unexpected.push(`attempted network connections${obs.network ? ' around the proxy' : ''}: ${list}`);
      if (!action.effects.network) {
        netOk = false;
        hard.push(`undeclared network use attempted: ${list}`);
      } else if (obs.network) {
        // The declaration is "through the host proxy, to the allowlist": anything else is undeclared.
        // (libc's own probes, such as asking an nscd that exists nowhere, were left out by the observer.)
        netOk = false;
        hard.push(`network use around the proxy attempted (the only declared route is the host proxy): ${list}`);
      }
    }
    const net = obs.network;
    if (net) {
      const refused = refusedLines(net);
      const used = net.connections.some((c) => c.allowed);
      if (!action.effects.network && (used || refused.length > 0)) {
        netOk = false;
        hard.push(`undeclared network use through the proxy: ${net.connections.length} request(s)`);
      }
      if (refused.length > 0) {
        netOk = false;
        hard.push(`network requests outside the declared allowlist (refused by the host proxy): ${refused.slice(0, 8).join('; ')}${refused.length > 8 ? `; and ${refused.length - 8} more` : ''}`);
        unexpected.push(`asked the network proxy for destinations outside its allowlist: ${refused.slice(0, 8).join('; ')}`);
      }
      if (net.capsHit.length > 0) {
        resourcesOk = false;
        hard.push(`network caps exceeded (${net.capsHit.join(', ')}): ${obs.reason}`);
        unexpected.push(`exceeded its network caps (${net.capsHit.join(', ')})`);
      }
    }
    // A process still running when the program ended was started to outlive it (a daemon, a job
    // left in the background): the host killed it with the sandbox, and a person should know.
    // Only when the program ended on its own: a run the host killed ends every task at once, in no order.
    const outlived = obs.status === 'SUCCESS' || obs.status === 'FAILURE' ? se.processesSpawned.outlivedProgram : 0;
    if (outlived > 0) {
      soft.push(`${outlived} process(es) were still running when the program ended: the host killed them with the sandbox`);
      unexpected.push(`left ${outlived} process(es) running after it ended (killed by the host)`);
    }
    const others = se.signalsSent.filter((s) => s.result !== 'ok');
    if (others.length > 0) unexpected.push(`sent ${others.length} signal(s) that were refused`);
  }

  // Sandbox requirements: the run really was sandboxed, with every limit enforced (not only reported).
  const reportedOnly = obs.host.limits.filter((l) => l.enforcedBy === null).map((l) => l.limit);
  // The Monty lane's isolation is the interpreter itself (no syscalls on the program's behalf) in a
  // separate worker process that is itself sandboxed (bwrap as an unprivileged uid, no network, our
  // seccomp allowlist); the ns lane's is bubblewrap plus our seccomp filter.
  const monty = (obs as { monty?: { isolation: { isolatedChild: boolean; sandbox?: unknown; unsandboxedReason?: string } } }).monty;
  const montyUnsandboxed = monty !== undefined && !monty.isolation.sandbox;
  const isolated = monty ? monty.isolation.isolatedChild && !montyUnsandboxed : obs.host.seccomp;
  // Scratch is discarded with the run, but a part the host could not look at is unobserved, never
  // assumed empty: fail closed, as for an unreadable argument.
  if (obs.scratch?.incomplete) {
    observedFully = false;
    hard.push(coded('JG_SCRATCH_UNOBSERVED', `/dev/shm was not fully observed: ${obs.scratch.incomplete}`));
  }
  const sandboxOk = obs.status !== 'SANDBOX_ERROR' && isolated && reportedOnly.length === 0 && observedFully;
  if (obs.status === 'SANDBOX_ERROR') hard.push(`sandbox error: ${obs.reason}`);
  else if (monty && !monty.isolation.isolatedChild) hard.push('the Monty worker process was not isolated');
  else if (montyUnsandboxed) hard.push(`the Monty worker ran without its OS sandbox (bwrap, seccomp, an unprivileged uid)${monty.isolation.unsandboxedReason ? `: ${monty.isolation.unsandboxedReason}` : ''}`);
  else if (!isolated) hard.push('the seccomp filter was not applied');
  else if (reportedOnly.length > 0) hard.push(`limits only reported, not enforced on this host: ${reportedOnly.join(', ')}`);

  const rollbackOk = action.rollbackSupported && diffVerifiable && !unrestorable;
  if (!action.rollbackSupported) hard.push('rollback is not supported for this action');

  const compliance: Compliance = {
    effects_within_declaration: effectsOk,
    resources_within_limits: resourcesOk,
    within_scope: scopeOk,
    sandbox_requirements_met: sandboxOk,
    rollback_possible: rollbackOk,
    no_privileged_syscalls: privOk,
    no_device_access: devOk,
    no_undeclared_network: netOk,
  };

  if (obs.status === 'POLICY_ABORTED') unexpected.push(`the sandbox stopped the program: ${obs.reason}`);
  // /dev/shm is scratch like /tmp (capped, discarded), but a program that leaves files in it is worth a note.
  if (obs.scratch && obs.scratch.shmFiles > 0) unexpected.push(`left ${obs.scratch.shmFiles} entr${obs.scratch.shmFiles === 1 ? 'y' : 'ies'} (${obs.scratch.shmBytes} bytes) in /dev/shm (discarded with the run)`);
  const missing = action.outputsExpected.filter((p) => !(outChanges ?? []).some((c) => c.path === p));
  if (missing.length > 0) soft.push(`expected outputs not produced: ${missing.join(', ')}`);
  if (obs.status !== 'SUCCESS' && hard.length === 0) soft.push(`the program ended with ${obs.status}: ${obs.reason}`);
  if (action.risk === 'CRITICAL') hard.push('risk level CRITICAL is blocked');
  if (action.confirmationRequired) soft.push('the declaration asks for a person to confirm');
  if (action.risk === 'HIGH') soft.push('risk level HIGH needs a person to confirm');

  const allCompliant = Object.values(compliance).every(Boolean);
  const verdict: Verdict = hard.length > 0 || !allCompliant ? 'BLOCK' : soft.length > 0 ? 'REQUIRE_CONFIRMATION' : 'PROMOTE';
  const reasons = verdict === 'PROMOTE' ? ['every compliance check passed; effects match the declaration'] : [...hard, ...soft];
  // Said wherever the result goes, though it changes no verdict: what isolated this run was weaker.
  if (obs.host.hostIds === 'own-gid') reasons.push(coded('JG_SHARED_UID', `the sandbox had the sandbox user's uid ${obs.host.hostUid}, shared with other runs that may write a scope it could not have idmapped (${obs.host.hostIdsWhy ?? 'reason not given'})`));
  return { compliance, verdict, reasons, unexpected };
}
