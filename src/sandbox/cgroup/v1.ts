// cgroup v1: one directory per controller hierarchy (memory, pids, cpuacct, freezer).
// Kill: freeze the group (no fork can race us), SIGKILL every task, thaw so the kills land.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { CgroupInfo, CgroupLimits, CgroupUsage, RunCgroup } from './types.js';
import { pidsIn, readKeyed, readNumber, readOr, removeGroup, sleep, write, type Read } from './util.js';
import type { HeldFiles } from '../../base/held-files.js';

export function createV1(info: CgroupInfo, runName: string, limits: CgroupLimits, held: HeldFiles | null = null): RunCgroup {
  // A group that lives across runs reads its counters through files held open (closed by destroy()).
  const read: Read = held ? (p) => held.read(p) : readOr;
  const dirs: Record<string, string> = {};
  for (const c of ['memory', 'pids', 'cpuacct', 'freezer'] as const) {
    const base = info.bases[c];
    if (!base || !info.controllers.includes(c)) continue;
    const dir = join(base, runName);
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    dirs[c] = dir;
  }
  const mem = dirs.memory;
  if (mem) {
    write(join(mem, 'memory.limit_in_bytes'), String(limits.memoryBytes));
    // memsw must be >= the memory limit; equal means no swap on top of it.
    if (existsSync(join(mem, 'memory.memsw.limit_in_bytes'))) write(join(mem, 'memory.memsw.limit_in_bytes'), String(limits.memoryBytes));
    else if (existsSync(join(mem, 'memory.swappiness'))) write(join(mem, 'memory.swappiness'), '0');
  }
  if (dirs.pids) write(join(dirs.pids, 'pids.max'), String(limits.pids));
  const all = Object.values(dirs);
  const hasMemsw = mem !== undefined && existsSync(join(mem, 'memory.memsw.limit_in_bytes'));
  let memoryLimit = limits.memoryBytes;
  const oomCount = (): number => (mem ? (readKeyed(join(mem, 'memory.oom_control'), 'oom_kill', read) ?? 0) : 0);
  const pidsMax = (): number => (dirs.pids ? (readKeyed(join(dirs.pids, 'pids.events'), 'max', read) ?? 0) : 0);
  const memFail = (): number => (mem ? (readNumber(join(mem, 'memory.failcnt'), read) ?? 0) : 0);

  const setMemoryLimit = (bytes: number): void => {
    if (!mem) throw new Error('no memory controller');
    if (bytes === memoryLimit) return;
    // memsw must stay >= the memory limit: raise it first, lower it last.
    const raising = bytes > memoryLimit;
    if (hasMemsw && raising) write(join(mem, 'memory.memsw.limit_in_bytes'), String(bytes));
    write(join(mem, 'memory.limit_in_bytes'), String(bytes));
    if (hasMemsw && !raising) write(join(mem, 'memory.memsw.limit_in_bytes'), String(bytes));
    memoryLimit = bytes;
  };

  const killAll = async (): Promise<void> => {
    const fz = dirs.freezer;
    const anyDir = all[0];
    if (!anyDir) return;
    for (let round = 0; round < 100; round++) {
      const pids = new Set<number>();
      for (const d of all) for (const p of pidsIn(d)) pids.add(p);
      if (pids.size === 0) return;
      if (fz) {
        write(join(fz, 'freezer.state'), 'FROZEN');
        for (let i = 0; i < 50 && (readOr(join(fz, 'freezer.state')) ?? '').trim() === 'FREEZING'; i++) await sleep(1);
        for (const p of pidsIn(fz)) pids.add(p);
      }
      for (const p of pids) {
        try {
          process.kill(p, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
      if (fz) write(join(fz, 'freezer.state'), 'THAWED');
      await sleep(round < 10 ? 1 : 10);
    }
  };

  return {
    version: 1,
    dirs: all,
    enforces: { memory: mem !== undefined, pids: dirs.pids !== undefined, cpuAccounting: dirs.cpuacct !== undefined },
    addProcess(pid: number): void {
      for (const d of all) write(join(d, 'cgroup.procs'), String(pid));
    },
    setMemoryLimit,
    setLimits(l: CgroupLimits): void {
      if (mem) setMemoryLimit(l.memoryBytes);
      if (dirs.pids) write(join(dirs.pids, 'pids.max'), String(l.pids));
    },
    memoryBytes(): number | null {
      return mem ? readNumber(join(mem, 'memory.usage_in_bytes'), read) : null;
    },
    cpuSplitMs() {
      if (!dirs.cpuacct) return null;
      // cpuacct.usage_all: one line per CPU, "cpu user system" in ns (Linux 4.7+).
      const all = read(join(dirs.cpuacct, 'cpuacct.usage_all'));
      if (all !== null) {
        let user = 0;
        let system = 0;
        for (const line of all.split('\n').slice(1)) {
          const f = line.trim().split(/\s+/);
          if (f.length === 3) {
            user += Number(f[1]);
            system += Number(f[2]);
          }
        }
        if (Number.isFinite(user) && Number.isFinite(system)) return { user: user / 1e6, system: system / 1e6 };
      }
      const user = readNumber(join(dirs.cpuacct, 'cpuacct.usage_user'), read);
      const sys = readNumber(join(dirs.cpuacct, 'cpuacct.usage_sys'), read);
      return user === null || sys === null ? null : { user: user / 1e6, system: sys / 1e6 };
    },
    cpuTotalMs(): number | null {
      const ns = dirs.cpuacct ? readNumber(join(dirs.cpuacct, 'cpuacct.usage'), read) : null;
      return ns === null ? null : ns / 1e6;
    },
    limitHit() {
      return { memory: oomCount() > 0, pids: pidsMax() > 0 };
    },
    usage(): CgroupUsage {
      const u: CgroupUsage = { cpuUserMs: null, cpuSystemMs: null, peakMemoryBytes: null, unmeasured: {}, oomKilled: oomCount() > 0, pidsLimitHit: pidsMax() > 0 };
      if (dirs.cpuacct) {
        const user = readNumber(join(dirs.cpuacct, 'cpuacct.usage_user'), read);
        const sys = readNumber(join(dirs.cpuacct, 'cpuacct.usage_sys'), read);
        u.cpuUserMs = user === null ? null : user / 1e6;
        u.cpuSystemMs = sys === null ? null : sys / 1e6;
        if (user === null) u.unmeasured.cpuUserMs = 'cpuacct.usage_user unreadable';
        if (sys === null) u.unmeasured.cpuSystemMs = 'cpuacct.usage_sys unreadable';
      } else {
        u.unmeasured.cpuUserMs = u.unmeasured.cpuSystemMs = 'cgroup v1 cpuacct controller is not mounted';
      }
      if (mem) {
        u.peakMemoryBytes = readNumber(join(mem, 'memory.max_usage_in_bytes'), read);
        if (u.peakMemoryBytes === null) u.unmeasured.peakMemoryBytes = 'memory.max_usage_in_bytes unreadable';
        // An OOM kill can be recorded only as failcnt on kernels without oom_kill in oom_control.
        if (!u.oomKilled && memFail() > 0 && readKeyed(join(mem, 'memory.oom_control'), 'oom_kill', read) === null) u.oomKilled = true;
      } else u.unmeasured.peakMemoryBytes = 'cgroup v1 memory controller is not mounted';
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
      for (const d of all) {
        const err = await removeGroup(d);
        if (err) errors.push(err);
      }
      return errors;
    },
  };
}
