// After a crash (kill -9 of a service mid-run), a run's cgroup, its /out tmpfs and scope overlays
// stay behind: the sandbox's processes end with its pid namespace, but nothing unmounts or removes.
// sweepOrphans() cleans what belongs to staging bases whose owner process is gone.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { detectCgroups } from '../cgroup/index.js';

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** Mount points at or below `dir`, deepest first (from /proc/self/mountinfo). */
export function mountsBelow(dir: string): string[] {
  let info: string;
  try {
    info = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  return info
    .split('\n')
    .map((l) => l.split(' ')[4]?.replace(/\\040/g, ' ') ?? '')
    .filter((m) => m === dir || m.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
}

/** SIGKILL what is left in a run's group and remove it, waiting up to ~1 s for the killed tasks to go (EBUSY until then). */
function killAndRemoveGroup(group: string): string | null {
  for (let i = 0; ; i++) {
    try {
      for (const pid of readFileSync(join(group, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) process.kill(Number(pid), 'SIGKILL');
      rmdirSync(group);
      return null;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return null;
      if (code !== 'EBUSY' && code !== 'ESRCH') return (e as Error).message;
      if (i >= 100) return `still busy after 1 s: ${(e as Error).message}`;
      Atomics.wait(PAUSE, 0, 0, 10); // a sync sweep (once per process): a short blocking pause is fine
    }
  }
}
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

export interface SweepReport {
  /** Run ids whose leftovers were cleaned. */
  runs: string[];
  /** What could not be cleaned, with why (reported, never fatal). */
  errors: string[];
}

export function sweepOrphans(): SweepReport {
  const report: SweepReport = { runs: [], errors: [] };
  const cg = detectCgroups(process.getuid?.() === 0);
  for (const name of readdirSync(tmpdir()).filter((n) => n.startsWith('airlock-ns-'))) {
    const base = join(tmpdir(), name);
    const owner = Number.parseInt(existsSync(join(base, 'owner.pid')) ? readFileSync(join(base, 'owner.pid'), 'utf8') : '', 10);
    if (!Number.isInteger(owner) || alive(owner)) continue;
    let groupsLeft = false;
    for (const run of readdirSync(base).filter((n) => n.startsWith('ns-'))) {
      for (const mount of Object.values(cg.mounts)) {
        const group = join(mount, 'airlock', run);
        if (!existsSync(group)) continue;
        const err = killAndRemoveGroup(group);
        if (err) {
          report.errors.push(`cgroup ${group}: ${err}`);
          groupsLeft = true;
        }
      }
      report.runs.push(run);
    }
    for (const m of mountsBelow(base)) {
      try {
        execFileSync('umount', ['-l', m], { stdio: 'ignore', env: { PATH: '/usr/bin:/bin:/usr/sbin:/sbin' } });
      } catch (e) {
        report.errors.push(`umount ${m}: ${(e as Error).message}`);
      }
    }
    // A group that could not be removed keeps its base (and run dir): the next sweep tries again.
    if (!groupsLeft && mountsBelow(base).length === 0) rmSync(base, { recursive: true, force: true });
  }
  return report;
}
