// Small statistics helpers shared by the benchmarks.
export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return sorted[Math.max(0, i)];
}

export function summary(samples) {
  const s = [...samples].sort((a, b) => a - b);
  return { n: s.length, p50: percentile(s, 50), p99: percentile(s, 99), min: s[0], max: s.at(-1) };
}

export const fmt = (x, digits = 2) => (Number.isFinite(x) ? x.toFixed(digits) : String(x));

/**
 * Times `n` sequential calls of `fn` (each may return an object with a `cleanup()`, run outside the
 * clock); `each(result, ms)`, when given, sees every result before its cleanup (outside the clock too).
 */
export async function timeEach(fn, n, each) {
  const ms = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const r = await fn();
    ms.push(performance.now() - t0);
    each?.(r, ms.at(-1));
    r?.cleanup?.();
  }
  return summary(ms);
}

/** Mean of a list of numbers. */
export const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

/**
 * Times `fns` in `n` rounds, each round calling every fn once in order (a drifting VM hits them
 * alike); a result's `cleanup()` runs outside the clock. Returns the samples of each fn.
 */
export async function inRounds(n, fns) {
  const ms = fns.map(() => []);
  for (let i = 0; i < n; i++) {
    for (const [k, fn] of fns.entries()) {
      const t0 = performance.now();
      const r = await fn();
      ms[k].push(performance.now() - t0);
      r?.cleanup?.();
    }
  }
  return ms;
}

/**
 * How a sandbox's move into its cgroup goes on this host (src/sandbox/cgroup/favor.ts), for the
 * benches' first lines: without favordynmods, a run started after a pause waits for the kernel.
 */
export async function cgroupMovesNote() {
  const { doctor } = await import('../dist/src/sandbox/doctor.js');
  const { probeCgroupMoves } = await import('../dist/src/sandbox/cgroup/favor.js');
  const caps = await doctor();
  if (!caps.cgroup.usable) return 'cgroup moves: no usable cgroup';
  const m = await probeCgroupMoves(caps.cgroup);
  const measured = m.measuredMs === null ? 'not measured' : `a move after a pause took ${m.measuredMs.toFixed(1)} ms`;
  return `cgroup moves: ${m.favored ? `favordynmods on ${m.where.join(', ')}` : 'no favordynmods mount'}; ${measured} (airlock doctor, "cgroup moves")`;
}

/**
 * The disk under a bench's workspace and what a new file costs there now (a full run makes two or
 * more): on an ext4 without a journal that cost depends on what was deleted in the last minutes.
 */
export async function diskNote(dir) {
  const { newFileCpuUs, workspaceDisk } = await import('../dist/src/workspace/disk.js');
  const d = workspaceDisk(dir);
  const journal = d.journal === null ? '' : d.journal ? ', with a journal' : ', NO JOURNAL (each new inode steps over those deleted in the last minutes)';
  const probe = newFileCpuUs(dir);
  const cost = 'us' in probe ? `a new file costs ${fmt(probe.us, 0)} us of CPU now` : `a new file was not timed: ${probe.notTimed}`;
  return `workspace disk: ${d.fsType}${d.source.startsWith('/') ? ` on ${d.source}` : ''}${journal}; ${cost} (airlock doctor, "workspace disk")`;
}
