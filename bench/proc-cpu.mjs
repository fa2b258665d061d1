// CPU of this process tree and of the whole machine, for "CPU per run" figures (bench/sandbox.mjs,
// bench/peers.mjs). The tree: this Node process (process.cpuUsage, µs), the children it has reaped
// (cutime + cstime of /proc/self/stat: bwrap and everything bwrap reaped), and the descendants still
// alive (a long-lived helper: the syscall tracer, the perl host helper, a Monty worker), each with
// its own reaped children. Kernel threads' work (a cgroup or mount namespace torn down by a kworker)
// is in no process's count: the machine's /proc/stat has it, and everyone else's work too.
import { readdirSync, readFileSync } from 'node:fs';

const TICK_MS = 10; // USER_HZ is 100 on Linux

/** [ppid, utime + stime, cutime + cstime] in ms, or null when the process is gone. */
function stat(pid) {
  let s;
  try {
    s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  const f = s.slice(s.lastIndexOf(')') + 2).split(' '); // f[0] is field 3 (state)
  return [Number(f[1]), (Number(f[11]) + Number(f[12])) * TICK_MS, (Number(f[13]) + Number(f[14])) * TICK_MS];
}

/** ms of CPU used so far by this process tree (see the module comment). */
export const treeCpuMs = () => {
  const t = treeCpu();
  return t.node + t.reaped + t.live;
};

/** The same in three parts: this Node process, the children it reaped, the descendants still alive. */
export function treeCpu() {
  const own = process.cpuUsage();
  const self = stat(process.pid);
  const node = (own.user + own.system) / 1000;
  const reaped = self ? self[2] : 0;
  let ms = 0;
  const byParent = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const st = stat(name);
    if (!st) continue;
    if (!byParent.has(st[0])) byParent.set(st[0], []);
    byParent.get(st[0]).push([Number(name), st]);
  }
  const walk = (pid) => {
    for (const [child, st] of byParent.get(pid) ?? []) {
      ms += st[1] + st[2];
      walk(child);
    }
  };
  walk(process.pid);
  return { node, reaped, live: ms };
}

/** The machine's busy CPU so far in ms (user, nice, system, irq, softirq of /proc/stat), all cores. */
export function machineCpuMs() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].split(/\s+/).slice(1).map(Number);
  return (f[0] + f[1] + f[2] + f[5] + f[6]) * TICK_MS;
}

/** The 1-minute load average, for the record beside a figure. */
export const loadAverage = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/**
 * Runs `body` and returns its result with the tree's and the machine's CPU over it, per run (`n` runs).
 * `settle` (optional) is awaited inside the measurement: work a run leaves behind (cleanup) is its cost.
 */
export async function cpuPerRun(n, body, settle) {
  const t0 = treeCpu();
  const m0 = machineCpuMs();
  const result = await body();
  if (settle) await settle();
  const t1 = treeCpu();
  const per = (k) => (t1[k] - t0[k]) / n;
  return { result, treeMs: per('node') + per('reaped') + per('live'), parts: { node: per('node'), reaped: per('reaped'), live: per('live') }, machineMs: (machineCpuMs() - m0) / n };
}
