// Shared by the per-run host ids' attack tests (run-ids*.test.ts): find a live run and its sleeping
// process from the host, and act with exactly that process's credentials, as an escape from its
// namespaces would have them.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from './helpers-ns.js';

export interface LiveRun {
  name: string;
  runDir: string;
  out: string;
  pid: number;
  uid: number;
  gid: number;
  /** The process's supplementary groups, as /proc prints them (space-separated; '' for none). */
  groups: string;
}

const status = (pid: string): string => {
  try {
    return readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return '';
  }
};

/** Each run in any Airlock staging base of TMPDIR whose /out/marker holds one of `names`, with its sleeping process. */
function findRuns(names: readonly string[]): LiveRun[] {
  const found: LiveRun[] = [];
  for (const b of readdirSync(tmpdir()).filter((n) => n.startsWith('airlock-ns-'))) {
    let runs: string[];
    try {
      runs = readdirSync(join(tmpdir(), b)).filter((n) => n.startsWith('ns-'));
    } catch {
      continue;
    }
    for (const r of runs) {
      const runDir = join(tmpdir(), b, r);
      // /out is on the run's capped tmpfs (rw/) as root.
      const out = [join(runDir, 'rw', 'out'), join(runDir, 'out')].find((o) => existsSync(join(o, 'marker')));
      const name = out ? readFileSync(join(out, 'marker'), 'utf8').trim() : '';
      if (!out || !names.includes(name)) continue;
      // The run's folder is root:<its gid>; its processes have that gid in every case (the uid may be the sandbox user's).
      const gid = statSync(runDir).gid;
      const pid = readdirSync('/proc').find((p) => /^\d+$/.test(p) && /^Name:\s+sleep$/m.test(status(p)) && new RegExp(`^Gid:\\s+${gid}\\s`, 'm').test(status(p)));
      if (!pid) continue;
      const st = status(pid);
      found.push({ name, runDir, out, pid: Number(pid), uid: Number(/^Uid:\s+(\d+)/m.exec(st)![1]), gid, groups: /^Groups:[ \t]*(.*)$/m.exec(st)![1]!.trim() });
    }
  }
  return found.sort((x, y) => x.name.localeCompare(y.name));
}

/** Waits until each run named in `names` wrote its marker and sleeps; returns them in name order. */
export async function liveRuns(names: readonly string[]): Promise<LiveRun[]> {
  await until(`runs ${names} to write their marker and sleep`, () => findRuns(names).length === names.length, () => readdirSync(tmpdir()));
  return findRuns(names);
}

/** Runs `script` (node, CommonJS) with exactly `who`'s uid, gid and supplementary groups; returns its stdout. */
export function as(who: Pick<LiveRun, 'uid' | 'gid' | 'groups'>, script: string): string {
  const groups = who.groups ? ['--groups', who.groups.split(/\s+/).join(',')] : ['--clear-groups'];
  const p = spawnSync('setpriv', ['--reuid', String(who.uid), '--regid', String(who.gid), ...groups, process.execPath, '-e', script], { encoding: 'utf8' });
  assert.equal(p.status, 0, p.stderr);
  return p.stdout;
}
