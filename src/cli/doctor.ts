import { doctor, type HostCapabilities, type LimitMechanism } from '../sandbox/doctor.js';
import type { LimitName } from '../sandbox/types.js';
import { readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { untraversable } from '../sandbox/ns/staging.js';
import { probeScopeIdmap } from '../sandbox/ns/idmap-probe.js';
import type { SandboxHostUser } from '../sandbox/sandbox-user.js';
import { ptraceRefusedBecause, tracerBinaryPath } from '../sandbox/observe/tracer.js';
import { nativeBinaryPath } from '../base/native.js';
import { PAUSE_MS, probeCgroupMoves, type CgroupMoves } from '../sandbox/cgroup/favor.js';
import { HALTPOLL_PARAM, IDLE_POLL_NS, probeIdleCpus, type IdleCpus } from '../sandbox/idle-cpus.js';
import { newFileCpuUs, workspaceDisk, type NewFileCost, type WorkspaceDisk } from '../workspace/disk.js';
import { workspaceRoot } from '../workspace/workspace.js';
import { ledgerSummary } from '../sandbox/run-id-rescan.js';
import type { RunIdPool } from '../sandbox/run-ids.js';

/** A person's name for each limit, and the order doctor lists them in. */
const LIMIT_LABELS: Record<LimitName, string> = {
  memoryBytes: 'memory',
  pids: 'processes',
  cpuMs: 'CPU time',
  outBytes: 'disk (/out)',
  tmpBytes: 'disk (/tmp)',
  files: 'files',
  wallMs: 'wall time',
  stdoutBytes: 'stdout',
  stderrBytes: 'stderr',
};
const MECHANISM: Record<LimitMechanism, string> = {
  cgroup: 'enforced by a cgroup',
  'cgroup-delegated': 'enforced by a delegated cgroup',
  rlimit: 'rlimit only',
  tmpfs: 'enforced by a capped tmpfs',
  host: 'enforced by the host',
  none: 'NOT ENFORCED',
};

/** Whether a service can keep ns sandboxes started ahead of need here (src/sandbox/ns/pool.ts), and why not. */
function poolLine(isRoot: boolean, tracer: string | null): string {
  const shim = nativeBinaryPath('airlock-exec');
  if (!shim) return 'NO: airlock-exec is not built (no C compiler when Airlock was built): every run starts its own sandbox';
  if (!isRoot || !tracer || process.env.AIRLOCK_SYSCALL_TRACER === 'strace') return 'NO: they need root and the host syscall tracer: every run starts its own sandbox';
  return `yes: services keep ${Number(process.env.AIRLOCK_SANDBOX_POOL ?? 2)} per shape of limits for runs without a scope or the network (AIRLOCK_SANDBOX_POOL)`;
}

/** How a declared scope is seen (runner.ts: the host's overlay as root, else bwrap's), or why it cannot be. */
function overlayLine(c: HostCapabilities): string {
  if (c.isRoot && c.overlayfs && c.mountBinary) return 'yes (declared scopes are seen through a copy-on-write overlay)';
  if (c.bwrap?.supports.overlay) return 'yes, through bwrap --overlay (declared scopes are seen through a copy-on-write overlay)';
  const why = !c.overlayfs ? 'no overlay filesystem in this kernel' : c.isRoot ? 'no mount binary' : `not root, and bwrap ${c.bwrap?.version ?? ''} has no --overlay (0.9 and later have it)`;
  return `NO for declared scopes (${why}): a run that declares a scope is refused (NS_OVERLAY_UNAVAILABLE); runs without one are not affected`;
}

/** Whether a service holds launchers ahead of need here (src/sandbox/ns/held.ts), and why not. */
function heldLine(isRoot: boolean, tracer: string | null, cgroupUsable: boolean): string {
  if (!isRoot || !tracer || process.env.AIRLOCK_SYSCALL_TRACER === 'strace') return 'NO: they need root and the host syscall tracer: each run started on request forks its launcher';
  if (!cgroupUsable) return 'NO: no usable cgroup (nothing to move into ahead of need)';
  const n = Number(process.env.AIRLOCK_HELD_LAUNCHERS ?? 2);
  if (!(Number.isSafeInteger(n) && n > 0)) return `off (AIRLOCK_HELD_LAUNCHERS=${process.env.AIRLOCK_HELD_LAUNCHERS}): each run started on request forks its launcher`;
  return `yes: services hold ${n} launchers already moved into fresh cgroups, for runs no waiting sandbox fits (AIRLOCK_HELD_LAUNCHERS)`;
}

/** Above this, a move waited for the kernel (a favored move takes ~0.3 ms, a waiting one 7.4-26.5 ms on the VM measured). */
const SLOW_MOVE_MS = 2;

/** How an idle CPU wakes here (src/sandbox/idle-cpus.ts), and the fix when each wake-up exits to the hypervisor. */
function idleLine(i: IdleCpus): string {
  if (i.driver !== 'haltpoll') return `${i.driver ?? 'no cpuidle driver named in /sys'}: not a KVM guest's haltpoll, nothing to set`;
  if (i.pollNs === null) return `haltpoll, its polling time unreadable (${HALTPOLL_PARAM})`;
  if (i.pollNs > 0) return `haltpoll: an idle vCPU polls ${i.pollNs / 1000} µs before it halts`;
  return `HALT AT ONCE: haltpoll with guest_halt_poll_ns=0, so each syscall the tracer observes wakes an idle vCPU through the hypervisor (on the VM measured, 198-267 µs per traced open, 99-102 µs with polling: npm run bench:observed-calls)
                 fix (root): airlock setup --poll-idle-cpus (idle vCPUs poll ${IDLE_POLL_NS / 1000} µs before they halt, until the next reboot; the hypervisor spends that polling)`;
}

/** How a sandbox's move into its cgroup goes here (src/sandbox/cgroup/favor.ts), and the fix when it waits. */
function movesLine(m: CgroupMoves): string {
  const measured = m.measuredMs === null ? 'could not be measured' : `after a ${PAUSE_MS} ms pause took ${m.measuredMs.toFixed(1)} ms`;
  if (m.favored) return `fast: favordynmods on ${m.where.join(', ')} (a move ${measured})`;
  if (m.measuredMs !== null && m.measuredMs < SLOW_MOVE_MS) return `fast: a move ${measured} (the kernel favors cgroup moves: favordynmods set since boot, or a kernel that does not wait)`;
  return `${m.measuredMs === null ? 'UNKNOWN' : 'SLOW AFTER A PAUSE'}: a move ${measured}. Without favordynmods the first move into a cgroup after a pause waits for an RCU grace period (7.4-26.5 ms on the VM measured): every sandbox a one-shot command starts pays it (a service holds launchers already moved for its runs started on request)
                 fix (root): airlock setup --favor-cgroup-moves (until the next reboot; in exchange every fork and exit on the host is slightly slower)`;
}

/** The workspace's file system: what a new file costs there, and what a crash would leave (src/workspace/disk.ts). */
function diskLine(d: WorkspaceDisk, probe: NewFileCost | null, root: string): string {
  const where = `${d.exists ? root : `${root} (not made yet: checked ${d.checked})`}: ${d.fsType}${d.source.startsWith('/') ? ` on ${d.source}` : ''}${d.mountPoint ? ` (mounted at ${d.mountPoint})` : ''}`;
  const cost = probe === null ? '' : 'us' in probe ? `; a new file costs ${Math.round(probe.us)} us of CPU here now (a run makes two or more)` : `; a new file was not timed: ${probe.notTimed}`;
  if (d.journal === false) {
    return `${where}, NO JOURNAL${cost}. Without a journal, ext4 makes every new file step over each file deleted in the last minutes (up to ~1 ms of CPU each, measured), and a rename is not atomic across a crash: after a power loss, run e2fsck on ${d.source || 'the device'} before \`airlock recover\`
                 fix: a workspace on a file system with a journal (--workspace, AIRLOCK_HOME), or give this one a journal (tune2fs -O has_journal, on the unmounted device)`;
  }
  if (d.fsType === 'tmpfs') return `${where}, in memory: run records, the audit log and the promotion journal are lost at reboot${cost}`;
  return `${where}${d.journal ? ', with a journal' : ''}${cost}`;
}

/**
 * `airlock doctor`: what this host can enforce, per limit and how, and (last line) what every run
 * will get: runnable, or BLOCKed and why, with the fix. Exit 0 when runs can pass, 1 when the ns
 * lane cannot run or every run would be BLOCKed.
 */
export async function doctorCommand(opts: { json?: boolean; workspace?: string }): Promise<number> {
  const c = await doctor(true);
  const moves = c.cgroup.usable ? await probeCgroupMoves(c.cgroup) : null;
  const root = workspaceRoot(opts.workspace);
  const disk = workspaceDisk(root);
  const newFileUs = disk.exists ? newFileCpuUs(root) : null; // a workspace not made yet is not made for this
  const scopeIdmap = c.isRoot && c.sandboxHostUser && 'range' in c.runIds ? await probeScopeIdmap(c, c.sandboxHostUser.uid) : null;
  const idle = probeIdleCpus();
  if (opts.json) {
    process.stdout.write(JSON.stringify({ ...c, cgroupMoves: moves, idleCpus: idle, scopeIdmapFailure: scopeIdmap, workspaceDisk: { ...disk, newFile: newFileUs } }, null, 2) + '\n');
    return c.blockers.length > 0 || c.outlook.blockedBecause.length > 0 ? 1 : 0;
  }
  const yes = (b: boolean) => (b ? 'yes' : 'NO');
  // Runs stage below TMPDIR, and bwrap (as the sandbox's host user) must reach it.
  const runUser = 'range' in c.runIds ? { uid: c.runIds.range.first, gid: c.runIds.range.first } : c.sandboxHostUser;
  const staging = c.isRoot && runUser ? untraversable(tmpdir(), runUser) : null;
  const tracer = tracerBinaryPath();
  const ptraceRefused = ptraceRefusedBecause(c.isRoot);
  const tracerLine =
    process.env.AIRLOCK_SYSCALL_TRACER === 'strace' ? 'off (AIRLOCK_SYSCALL_TRACER=strace): strace observes'
    : !tracer ? 'NOT BUILT (no C compiler when Airlock was built: apt-get install gcc libc6-dev, then npm run build): strace observes'
    : ptraceRefused ? `${tracer} present but unused (${ptraceRefused}): strace observes`
    : `${tracer} (ptrace, attached per run${c.isRoot ? '' : ', as this user'}; side effects observed)`;
  const lines = [
    `platform         ${c.platform} (kernel ${c.kernel}), running as ${c.isRoot ? 'root' : 'non-root'}`,
    `user namespaces  ${yes(c.userNamespaces.available)} (${c.userNamespaces.detail})`,
    `bubblewrap       ${c.bwrap ? `${c.bwrap.version} at ${c.bwrap.path}; --disable-userns ${yes(c.bwrap.supports.disableUserns)}, --overlay ${yes(c.bwrap.supports.overlay)}, --size ${yes(c.bwrap.supports.size)}` : 'NOT FOUND (apt-get install bubblewrap)'}`,
    `sandbox uid      ${c.sandboxHostUser ? sandboxUserLine(c.sandboxHostUser) : 'the caller\'s own uid (not root)'}`,
    ...(c.isRoot ? [`run uids         ${runIdsLine(c.runIds, scopeIdmap)}`] : []),
    `cgroups          ${c.cgroup.usable ? `v${c.cgroup.version}${c.cgroup.delegation?.kind === 'delegated' ? ', delegated to this user' : ''}; controllers: ${c.cgroup.controllers.join(', ') || 'none'}` : 'NOT USABLE'} (${c.cgroup.detail})${c.cgroup.fix ? `\n                 fix: ${c.cgroup.fix}` : ''}`,
    ...(moves ? [`cgroup moves     ${movesLine(moves)}`] : []),
    `seccomp          ${yes(c.seccomp.available)} (${c.seccomp.detail})`,
    `overlayfs        ${overlayLine(c)}`,
    `syscall tracer   ${tracerLine}`,
    `idle CPUs        ${idleLine(idle)}`,
    `warm sandboxes   ${poolLine(c.isRoot, tracer)}`,
    `held launchers   ${heldLine(c.isRoot, tracer, c.cgroup.usable)}`,
    `strace           ${c.strace ? `${c.strace.version} at ${c.strace.path} (the fallback tracer)` : 'NOT FOUND: without the syscall tracer, side effects will be null (unmeasured) and every run BLOCKed'}`,
    `tmpfs caps       /out ${yes(c.tmpfsSizeCaps.hostOut)}, /tmp ${yes(c.tmpfsSizeCaps.sandboxTmp)} (${c.tmpfsSizeCaps.detail})`,
    `interpreters     ${c.interpreters.map((i) => `${i.name} ${i.version}`).join(', ') || 'none'}`,
    `workspace disk   ${diskLine(disk, newFileUs, root)}`,
    `staging folder   ${staging ? `NOT USABLE: ${staging}` : `${tmpdir()} (TMPDIR): the sandbox's host user can reach it`}`,
    'limits (what enforces each; an rlimit bounds each process, not the sandbox as a whole, and does not count for memory or processes):',
    ...c.limits.map((l) => `  ${LIMIT_LABELS[l.limit].padEnd(12)} ${(MECHANISM[l.mechanism] + (l.enforced ? '' : l.mechanism === 'rlimit' ? ', NOT COUNTED AS ENFORCED' : '')).padEnd(38)} ${l.how}`),
  ];
  const blockers = staging ? [...c.blockers, 'the staging folder (TMPDIR) is not reachable by the sandbox\'s host user: see "staging folder" above'] : c.blockers;
  const blocked = c.outlook.blockedBecause;
  if (blockers.length > 0) lines.push('the ns lane cannot run here:', ...blockers.map((b) => `  - ${b}`));
  else if (blocked.length > 0) {
    lines.push(
      `every ns run will be BLOCKed here: ${blocked.join('; ')}.${c.outlook.fix ? ` Fix: ${c.outlook.fix}` : ''}`,
    );
  } else lines.push(`the ns lane can run here, and runs can be PROMOTEd (limits enforced${c.cgroup.delegation?.kind === 'delegated' ? ' through the cgroup delegated to this user' : ''}).`);
  process.stdout.write(lines.join('\n') + '\n');
  return blockers.length > 0 || blocked.length > 0 ? 1 : 0;
}

/** Whether each sandbox has a host uid of its own (run-ids.ts), and how many are held now. */
function runIdsLine(r: HostCapabilities['runIds'], idmap: string | null): string {
  if ('off' in r) return `SHARED: every sandbox runs as the one sandbox user (${r.off}); an escape from one run's namespaces is the uid of every other live run`;
  let held = 0;
  try {
    held = readdirSync(r.dir).length;
  } catch {
    /* counted as none */
  }
  const writers = idmap === null
    ? 'a run that may write a scope too, seeing the sandbox user\'s files there as its own through an idmapped mount (checked on TMPDIR\'s filesystem; a scope on one without idmapped mounts: the sandbox user\'s uid, its own gid)'
    : `but a run that may write a scope has the SANDBOX USER'S UID (its own gid): idmapped scope mounts fail here (${idmap}), so two such runs share a uid`;
  return `each sandbox its own uid and gid from ${r.range.first}-${r.range.first + r.range.count - 1}, ${writers}; ${held} held now, in ${r.dir}\n                 ${ledgerLine(r)}`;
}

/** How much of the range is handed out (each id once until a rescan: run-id-ledger.ts). */
function ledgerLine(r: RunIdPool): string {
  const l = ledgerSummary(r);
  if ('code' in l) return `UNREADABLE LEDGER: ${l.message}`;
  const left = l.count - l.given;
  const kept = l.tainted > 0 ? `; ${l.tainted} kept out by the last rescan (they owned something on the host, or a run held them)` : '';
  const head = left === 0 ? 'USED UP: no sandbox gets a uid of its own until a rescan' : left < l.count / 10 ? `${left} LEFT` : `${left} left`;
  const fix = left < l.count / 10 ? '\n                 fix (root): airlock setup --rescan-run-ids (looks for what the range\'s ids own on the host, then hands them out again, skipping those)' : '';
  return `${head}: ${l.given} of ${l.count} handed out, each to one sandbox, since the last rescan (epoch ${l.epoch}, ${r.ledger})${kept}${fix}`;
}

/** Whose uid the sandbox runs as: Airlock's own user, or the shared `nobody` (sandbox-user.ts). */
function sandboxUserLine(u: SandboxHostUser): string {
  const whose = u.dedicated ? 'Airlock\'s own user' : `SHARED with the host's other nobody processes (${u.shared})`;
  const fix = u.dedicated ? '' : `\n                 fix (root): airlock setup --sandbox-user (a system user of Airlock's own: nothing else can reach its runs)`;
  return `host ${u.name} (${u.uid}), ${whose}; uid 65534 inside${sharedUidLine(u.uid)}${fix}`;
}

/**
 * Other processes running as the sandbox's host uid: such a process can reach a live run's /out and
 * scope folders on the host as the sandbox can (write into them, or race the host's walk of them
 * after the run). Airlock's own sandboxes (in its run cgroups: ns-*, monty-w-*) are counted out.
 */
function sharedUidLine(uid: number): string {
  const others: string[] = [];
  for (const pid of readdirSync('/proc').filter((n) => /^[0-9]+$/.test(n))) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const real = /^Uid:\s+([0-9]+)/m.exec(status)?.[1];
      const name = /^Name:\s+(.*)$/m.exec(status)?.[1] ?? '?';
      if (Number(real) !== uid) continue;
      // This command's own probes (bwrap as the sandbox user, maybe not reaped yet) are not others.
      if (Number(/^PPid:\s+([0-9]+)/m.exec(status)?.[1]) === process.pid || /^State:\s+Z/m.test(status)) continue;
      // A process in one of Airlock's run groups is a sandbox of a run (or a Monty worker's).
      if (/\/airlock\//.test(readFileSync(`/proc/${pid}/cgroup`, 'utf8'))) continue;
      others.push(`${pid} ${name}`);
    } catch {
      /* gone */
    }
  }
  if (others.length === 0) return ': no other process runs as it now';
  return `\n                 WARNING: ${others.length} other process(es) run as uid ${uid} (${others.slice(0, 5).join(', ')}${others.length > 5 ? ', ...' : ''}): they can reach live runs' /out and scope folders as the sandbox can; run no other service as this user on an Airlock host`;
}
