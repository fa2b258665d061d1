// `airlock setup --delegate USER` / `--undelegate USER` (root, once per user): the cgroup subtree that
// lets an ordinary user's runs have their limits enforced (src/sandbox/cgroup/setup.ts).
// `airlock setup --favor-cgroup-moves` (root): the kernel's favordynmods, so that a sandbox's move into
// its cgroup never waits for an RCU grace period (src/sandbox/cgroup/favor.ts).
// `airlock setup --sandbox-user` (root): the system user sandboxes run as (src/sandbox/sandbox-user.ts).
// `airlock setup --poll-idle-cpus` (root, a KVM guest with haltpoll): idle vCPUs poll before they
// halt, so a traced syscall's wake-ups stay cheap (src/sandbox/idle-cpus.ts).
// `airlock setup --rescan-run-ids` (root): looks for what the sandbox uid range owns on the host and
// starts handing its ids out again, skipping those (src/sandbox/run-id-rescan.ts).
import { favorCgroupMoves } from '../sandbox/cgroup/favor.js';
import { HALTPOLL_PARAM, IDLE_POLL_NS, pollIdleCpus } from '../sandbox/idle-cpus.js';
import { delegate, lookupUser, undelegate } from '../sandbox/cgroup/setup.js';
import { createSandboxUser } from '../sandbox/sandbox-user.js';
import { hostRunIds } from '../sandbox/run-ids.js';
import { rescanRunIds, type RescanReport } from '../sandbox/run-id-rescan.js';

export interface SetupOptions {
  delegate?: string;
  undelegate?: string;
  favorCgroupMoves?: boolean;
  pollIdleCpus?: boolean;
  sandboxUser?: boolean;
  rescanRunIds?: boolean;
  json?: boolean;
}

const isProblem = (x: object): x is { code: string; message: string } => 'code' in x && 'message' in x;

export async function setupCommand(opts: SetupOptions): Promise<number> {
  const out = (o: unknown, text: string): void => void process.stdout.write(opts.json ? JSON.stringify(o, null, 2) + '\n' : text);
  const fail = (p: { code: string; message: string }): number => {
    if (opts.json) process.stdout.write(JSON.stringify({ ok: false, problems: [p] }, null, 2) + '\n');
    else process.stderr.write(`airlock setup: ${p.code}: ${p.message}\n`);
    return ['SETUP_DELEGATE_FAILED', 'SETUP_FAVOR_FAILED', 'SETUP_POLL_FAILED', 'SETUP_SANDBOX_USER_FAILED', 'SETUP_SANDBOX_USER_SHARED', 'RESCAN_INCOMPLETE', 'NS_RUN_IDS'].includes(p.code) ? 3 : 2;
  };
  const asked = [opts.delegate, opts.undelegate, opts.favorCgroupMoves, opts.pollIdleCpus, opts.sandboxUser, opts.rescanRunIds].filter((x) => x !== undefined && x !== false);
  if (asked.length !== 1) return fail({ code: 'SETUP_USAGE', message: 'give exactly one of --delegate USER, --undelegate USER, --favor-cgroup-moves, --poll-idle-cpus, --sandbox-user or --rescan-run-ids' });
  if (opts.rescanRunIds) {
    if (process.getuid?.() !== 0) return fail({ code: 'SETUP_RESCAN_NOT_ROOT', message: 'the rescan reads every file system of the host and the sandbox uid ledger: run it as root' });
    const pool = hostRunIds();
    if ('off' in pool) return fail({ code: 'SETUP_RESCAN_NO_RANGE', message: `sandboxes here have no uids of their own, so there is nothing to rescan: ${pool.off}` });
    const r = rescanRunIds(pool, { progress: opts.json ? undefined : (line) => void process.stderr.write(`${line}\n`) });
    if ('code' in r) return fail(r);
    out({ ok: true, ...r, found: r.found.slice(0, 1000) }, rescanText(r));
    return 0;
  }
  if (opts.sandboxUser) {
    const r = createSandboxUser();
    if (isProblem(r)) return fail(r);
    const { name, uid, gid } = r.user;
    out({ ok: true, created: r.created, user: { name, uid, gid } }, `${r.created ? 'made' : 'already there:'} ${name} (uid ${uid}, gid ${gid}), a system user of its own: root Airlock runs its sandboxes as it (airlock doctor, "sandbox uid")\n`);
    return 0;
  }
  if (opts.favorCgroupMoves) {
    const r = favorCgroupMoves();
    if (!r.ok) return fail(r.problem);
    out({ ok: true, favordynmods: true, already: r.already, where: r.where }, r.already ? `favordynmods was already on (${r.where}): nothing changed\n` : `favordynmods on (${r.where}): a sandbox's move into its cgroup no longer waits for an RCU grace period; every fork and exit on the host is slightly slower. It lasts until the next reboot, and the kernel cannot turn it off before (see the README to make it permanent).\n`);
    return 0;
  }
  if (opts.pollIdleCpus) {
    const r = pollIdleCpus();
    if (!r.ok) return fail(r.problem);
    const us = (ns: number): string => `${ns / 1000} µs`;
    out(
      { ok: true, guestHaltPollNs: r.already ? r.before : IDLE_POLL_NS, already: r.already, before: r.before },
      r.already
        ? `idle CPUs already poll ${us(r.before)} before they halt: nothing changed\n`
        : `idle CPUs now poll ${us(IDLE_POLL_NS)} before they halt (was ${us(r.before)}): a traced syscall's wake-ups no longer exit to the hypervisor each time; the hypervisor spends that polling. It lasts until the next reboot (to undo: echo ${r.before} > ${HALTPOLL_PARAM}).\n`,
    );
    return 0;
  }
  if (opts.delegate) {
    const user = lookupUser(opts.delegate);
    if (isProblem(user)) return fail(user);
    const r = delegate(user);
    if (isProblem(r)) return fail(r);
    out(
      { ok: true, user: user.name, cgroupVersion: r.version, dirs: r.dirs, notes: r.notes },
      [`delegated to ${user.name} (uid ${user.uid}), cgroup v${r.version}:`, ...r.dirs.map((d) => `  ${d}`), ...r.notes.map((n) => `note: ${n}`), `${user.name} can check with: airlock doctor`, ''].join('\n'),
    );
    return 0;
  }
  const r = await undelegate(opts.undelegate!);
  if (isProblem(r)) return fail(r);
  out({ ok: r.errors.length === 0, removed: r.removed, errors: r.errors }, [...r.removed.map((d) => `removed ${d}`), ...r.errors.map((e) => `NOT removed: ${e}`), r.removed.length + r.errors.length === 0 ? `nothing was delegated to ${opts.undelegate}` : '', ''].filter((l, i, a) => l !== '' || i === a.length - 1).join('\n'));
  return r.errors.length ? 3 : 0;
}

function rescanText(r: RescanReport): string {
  const found = r.found.slice(0, 50).map((f) => `  uid/gid ${f.id}: ${f.what}`);
  return [
    `looked at ${r.inodes} inodes (${r.walked.join(', ')}), System V IPC, the kernel's keyrings and every process`,
    r.found.length === 0
      ? 'nothing of the sandbox uid range was found on the host'
      : `FOUND ${r.found.length} thing(s) owned by sandbox uids (an escaped sandbox may have left them: look at them, then remove them and rescan):`,
    ...found,
    ...(r.found.length > found.length ? [`  ... and ${r.found.length - found.length} more (--json lists up to 1,000)`] : []),
    `epoch ${r.epoch} started: the ${r.given} ids handed out since the last rescan go to sandboxes again, except ${r.tainted.length} (${r.held.length} held by live runs now, the rest found above)`,
    '',
  ].join('\n');
}
