// cgroup v2: one directory under <unified>/airlock. cgroup.kill ends every process atomically.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { CgroupInfo, CgroupLimits, CgroupUsage, RunCgroup } from './types.js';
import { pidsIn, readKeyed, readNumber, readOr, removeGroup, sleep, write, type Read } from './util.js';
import type { HeldFiles } from '../../base/held-files.js';
import { HOST_LEAF } from './delegated.js';

const prepared = new Set<string>();

/**
 * A delegated v2 subtree holds this process (the kernel's rule for moves, delegated.ts), and a group
 * with processes of its own cannot give controllers to its children ("no internal processes"): move
 * them into a leaf of their own once, then enable the controllers for the run groups beside it.
 */
function prepareDelegated(base: string, enable: string): void {
  if (prepared.has(base)) return;
  const leaf = join(base, HOST_LEAF);
  const own = pidsIn(base);
  if (own.length > 0) {
    if (!existsSync(leaf)) mkdirSync(leaf, { mode: 0o755 });
    for (const p of own) {
      try {
        write(join(leaf, 'cgroup.procs'), String(p));
      } catch (e) {
        // A process that ended meanwhile is fine; anything else leaves the subtree unusable.
        if ((e as NodeJS.ErrnoException).code !== 'ESRCH') throw e;
      }
    }
  }
  if (enable) write(join(base, 'cgroup.subtree_control'), enable);
  prepared.add(base);
}

export function createV2(info: CgroupInfo, runName: string, limits: CgroupLimits, held: HeldFiles | null = null): RunCgroup {
  // A group that lives across runs reads its counters through files held open (closed by destroy()).
  const read: Read = held ? (p) => held.read(p) : readOr;
  const mount = info.mounts.unified;
  const parent = info.bases.unified;
  if (!mount || !parent) throw new Error('createV2 without a unified mount');
  const wanted = info.controllers.filter((c) => c === 'memory' || c === 'pids' || c === 'cpu');
  const enable = wanted.map((c) => `+${c}`).join(' ');
  if (info.delegation?.kind === 'delegated') prepareDelegated(parent, enable);
  else {
    if (!existsSync(parent)) mkdirSync(parent, { mode: 0o755 });
    // Controllers must be enabled top-down: at the hierarchy root, then in airlock/.
    if (enable) {
      write(join(mount, 'cgroup.subtree_control'), enable);
      write(join(parent, 'cgroup.subtree_control'), enable);
    }
  }
  const dir = join(parent, runName);
  mkdirSync(dir, { mode: 0o755 });
  const hasMem = existsSync(join(dir, 'memory.max'));
  const hasPids = existsSync(join(dir, 'pids.max'));
  if (hasMem) {
    write(join(dir, 'memory.max'), String(limits.memoryBytes));
    if (existsSync(join(dir, 'memory.swap.max'))) write(join(dir, 'memory.swap.max'), '0');
    // One process OOM-killed means the whole run is over: kill the group as a unit.
    if (existsSync(join(dir, 'memory.oom.group'))) write(join(dir, 'memory.oom.group'), '1');
  }
  if (hasPids) write(join(dir, 'pids.max'), String(limits.pids));
  let memoryLimit = limits.memoryBytes;
  const setMemoryLimit = (bytes: number): void => {
    if (!hasMem) throw new Error('no memory controller');
    if (bytes === memoryLimit) return;
    write(join(dir, 'memory.max'), String(bytes));
    memoryLimit = bytes;
  };
  const oom = (): boolean => (readKeyed(join(dir, 'memory.events'), 'oom_kill', read) ?? 0) > 0;
  const pidsHit = (): boolean => (readKeyed(join(dir, 'pids.events'), 'max', read) ?? 0) > 0;

  const killAll = async (): Promise<void> => {
    const hasKill = existsSync(join(dir, 'cgroup.kill'));
    for (let round = 0; round < 100; round++) {
      const pids = pidsIn(dir);
      if (pids.length === 0) return;
      if (hasKill) write(join(dir, 'cgroup.kill'), '1');
      else {
        // Kernels before 5.14: freeze, kill, thaw.
        if (existsSync(join(dir, 'cgroup.freeze'))) write(join(dir, 'cgroup.freeze'), '1');
        for (const p of pids) {
          try {
            process.kill(p, 'SIGKILL');
          } catch {
            /* gone */
          }
        }
        if (existsSync(join(dir, 'cgroup.freeze'))) write(join(dir, 'cgroup.freeze'), '0');
      }
      await sleep(round < 10 ? 1 : 10);
    }
  };

  return {
    version: 2,
    dirs: [dir],
    enforces: { memory: hasMem, pids: hasPids, cpuAccounting: true },
    addProcess(pid: number): void {
      write(join(dir, 'cgroup.procs'), String(pid));
    },
    setMemoryLimit,
    setLimits(l: CgroupLimits): void {
      if (hasMem) setMemoryLimit(l.memoryBytes);
      if (hasPids) write(join(dir, 'pids.max'), String(l.pids));
    },
    memoryBytes(): number | null {
      return hasMem ? readNumber(join(dir, 'memory.current'), read) : null;
    },
    cpuSplitMs() {
      const stat = read(join(dir, 'cpu.stat'));
      const get = (k: string): number | null => {
        const m = stat === null ? null : new RegExp(`^${k}\\s+(\\d+)`, 'm').exec(stat);
        return m?.[1] !== undefined ? Number(m[1]) / 1000 : null;
      };
      const user = get('user_usec');
      const system = get('system_usec');
      return user === null || system === null ? null : { user, system };
    },
    cpuTotalMs(): number | null {
      const us = readKeyed(join(dir, 'cpu.stat'), 'usage_usec', read);
      return us === null ? null : us / 1000;
    },
    limitHit() {
      return { memory: oom(), pids: pidsHit() };
    },
    usage(): CgroupUsage {
      const user = readKeyed(join(dir, 'cpu.stat'), 'user_usec', read);
      const sys = readKeyed(join(dir, 'cpu.stat'), 'system_usec', read);
      const peak = hasMem ? readNumber(join(dir, 'memory.peak'), read) : null;
      const u: CgroupUsage = {
        cpuUserMs: user === null ? null : user / 1000,
        cpuSystemMs: sys === null ? null : sys / 1000,
        peakMemoryBytes: peak,
        unmeasured: {},
        oomKilled: oom(),
        pidsLimitHit: pidsHit(),
      };
      if (user === null) u.unmeasured.cpuUserMs = 'cpu.stat has no user_usec';
      if (sys === null) u.unmeasured.cpuSystemMs = 'cpu.stat has no system_usec';
      if (peak === null) u.unmeasured.peakMemoryBytes = hasMem ? 'memory.peak is missing (kernel older than 5.19)' : 'the memory controller is not enabled for this group';
      return u;
    },
    killAll,
    async destroy(): Promise<string[]> {
      const errors: string[] = [];
      try {
        await killAll();
      } catch (e) {
        errors.push(`kill failed: ${(e as Error).message}`);
      }
      held?.close();
      const err = await removeGroup(dir);
      if (err) errors.push(err);
      return errors;
    },
  };
}
