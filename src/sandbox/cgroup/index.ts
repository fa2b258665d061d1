// cgroup detection and the per-run group (v2 preferred, v1 fallback).
import { accessSync, constants, existsSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { delegatedV1, delegatedV2 } from './delegated.js';
import type { CgroupController, CgroupInfo, CgroupLimits, RunCgroup } from './types.js';
import { primeAttach } from './prime.js';
import { HeldFiles } from '../../base/held-files.js';
import { readOr } from './util.js';
import { createV1 } from './v1.js';
import { createV2 } from './v2.js';

export type { CgroupController, CgroupInfo, CgroupLimits, CgroupUsage, RunCgroup } from './types.js';

/** Mount points of cgroup hierarchies from /proc/self/mountinfo. */
export function parseCgroupMounts(mountinfo: string): { v1: Record<string, string>; v2: string[] } {
  const v1: Record<string, string> = {};
  const v2: string[] = [];
  for (const line of mountinfo.split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep < 0) continue;
    const left = line.slice(0, sep).split(' ');
    const right = line.slice(sep + 3).split(' ');
    const mountPoint = left[4];
    if (!mountPoint) continue;
    if (right[0] === 'cgroup2') v2.push(mountPoint);
    else if (right[0] === 'cgroup') {
      for (const opt of (right[2] ?? '').split(',')) if (['memory', 'pids', 'cpu', 'cpuacct', 'freezer'].includes(opt)) v1[opt] = mountPoint;
    }
  }
  return { v1, v2 };
}

const writable = (p: string): boolean => {
  try {
    accessSync(p, constants.W_OK);
    return true;
  } catch {
    return false;
  }
};

/** This process's user name (the delegated folders are named after it). */
export function currentUserName(): string {
  try {
    return userInfo().username;
  } catch {
    return `uid${process.getuid?.() ?? -1}`;
  }
}

export function detectCgroups(isRoot: boolean): CgroupInfo {
  const { v1, v2 } = parseCgroupMounts(readOr('/proc/self/mountinfo') ?? '');
  if (!isRoot) return detectDelegated(v1, v2);
  // v2 counts only when it carries controllers (a hybrid host's empty `unified` does not).
  for (const m of v2) {
    const ctrls = (readOr(join(m, 'cgroup.controllers')) ?? '').trim().split(/\s+/).filter(Boolean);
    const controllers = ctrls.filter((c): c is CgroupController => c === 'memory' || c === 'pids' || c === 'cpu');
    if (controllers.length === 0) continue;
    const usable = isRoot && writable(m);
    return {
      version: 2,
      controllers,
      mounts: { unified: m },
      swapAccounting: existsSync(join(m, 'airlock', 'memory.swap.max')) || ctrls.includes('memory'),
      usable,
      bases: { unified: join(m, 'airlock') },
      delegation: usable ? { kind: 'root' } : null,
      detail: usable ? `cgroup v2 at ${m} (${controllers.join(', ')})` : `cgroup v2 at ${m} but not writable (not root)`,
    };
  }
  const controllers = (Object.keys(v1) as CgroupController[]).filter((c) => c !== 'cpu');
  if (controllers.length > 0) {
    const usable = isRoot && controllers.every((c) => writable(v1[c] as string));
    const mem = v1.memory;
    return {
      version: 1,
      controllers,
      mounts: v1,
      swapAccounting: mem !== undefined && existsSync(join(mem, 'memory.memsw.limit_in_bytes')),
      usable,
      bases: Object.fromEntries(controllers.map((c) => [c, join(v1[c] as string, 'airlock')])),
      delegation: usable ? { kind: 'root' } : null,
      detail: usable ? `cgroup v1 (${controllers.join(', ')})${v2.length ? '; the hybrid v2 hierarchy has no controllers' : ''}` : 'cgroup v1 but not writable (not root)',
    };
  }
  return { version: null, controllers: [], mounts: {}, swapAccounting: false, usable: false, bases: {}, delegation: null, detail: 'no cgroup hierarchy is mounted' };
}

/** Not root: only a subtree delegated to this user can be used (delegated.ts). */
function detectDelegated(v1: Record<string, string>, v2: string[]): CgroupInfo {
  const user = currentUserName();
  const uid = process.getuid?.() ?? -1;
  for (const m of v2) {
    // As for root: a hybrid host's v2 hierarchy without memory, pids or cpu does not count.
    const ctrls = (readOr(join(m, 'cgroup.controllers')) ?? '').trim().split(/\s+/);
    if (ctrls.some((c) => c === 'memory' || c === 'pids' || c === 'cpu')) return delegatedV2(m, user, uid, readOr('/proc/self/cgroup') ?? '');
  }
  if (Object.keys(v1).length > 0) return delegatedV1(v1, user, uid);
  return { version: null, controllers: [], mounts: {}, swapAccounting: false, usable: false, bases: {}, delegation: null, detail: 'no cgroup hierarchy is mounted' };
}

export interface GroupOptions {
  /** The caller moves the sandbox in shortly, on a request's path (not a launcher held ahead). Default true. */
  prime?: boolean;
  /** The group lives across many runs (a Monty worker's): its counters are read through files held open until destroy(). */
  holdFiles?: boolean;
}

/** Create this run's group with its limits. Throws on failure (the runner turns it into a SANDBOX_ERROR). */
export function createRunCgroup(info: CgroupInfo, runName: string, limits: CgroupLimits, opts: GroupOptions = {}): RunCgroup {
  if (!info.usable || info.version === null) throw new Error(`no usable cgroup: ${info.detail}`);
  const held = opts.holdFiles ? new HeldFiles() : null;
  const group = info.version === 2 ? createV2(info, runName, limits, held) : createV1(info, runName, limits, held);
  // Start the kernel's wait for that move now, after the group's mkdirs (prime.ts).
  if (opts.prime ?? true) primeAttach(info);
  return group;
}
