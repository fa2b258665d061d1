// `airlock setup --rescan-run-ids`: what the sandbox uid range owns on the host, before its ids are
// handed out again (run-id-ledger.ts). A program that escaped its namespaces runs on the host as its
// sandbox's uid, with no capability: what it can leave behind is an inode it made (in a folder anyone
// may write, or below one), a System V IPC object, a key in the kernel's keyrings, or a process. The
// rescan walks every local file system (not through other mounts, never following links, each folder
// opened from its parent's descriptor), reads /proc/sysvipc, /proc/key-users and every process's
// ids, and starts a new epoch in which the ids found, and those live runs hold, are never handed
// out. A walk that could not read everything starts nothing: what it did not see could hold a
// planted file.
import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import type { Problem } from '../base/problem.js';
import { ledgerText, readLedger, readTainted, withLedgerLock, writeLedgerFile, type RunIdRange } from './run-id-ledger.js';
import { processIds, readOr, type RunIdPool } from './run-ids.js';

/** Something of the range's ids on the host: a path, an IPC object, a keyring or a process. */
export interface Leftover {
  id: number;
  what: string;
}

/** File systems with nothing a process can leave a file in (or whose files are the kernel's). */
const PSEUDO = new Set(['proc', 'sysfs', 'cgroup', 'cgroup2', 'devpts', 'securityfs', 'debugfs', 'tracefs', 'bpf', 'configfs', 'fusectl', 'pstore', 'binfmt_misc', 'autofs', 'nsfs', 'efivarfs', 'rpc_pipefs', 'nfsd', 'selinuxfs', 'hugetlbfs']);

/**
 * The mount points to walk, one per file system (its mount of the whole file system when there is
 * one, else each mount of part of it), from a mountinfo text.
 */
export function mountsToWalk(mountinfo: string): string[] {
  const byDev = new Map<string, { whole: string | null; parts: string[] }>();
  for (const line of mountinfo.split('\n')) {
    const [left, right] = line.split(' - ');
    if (!left || !right) continue;
    const f = left.split(' ');
    const fstype = right.split(' ')[0]!;
    if (PSEUDO.has(fstype)) continue;
    const dev = f[2]!;
    const root = unescapeMount(f[3]!);
    const point = unescapeMount(f[4]!);
    const e = byDev.get(dev) ?? { whole: null, parts: [] };
    if (root === '/') e.whole ??= point;
    else e.parts.push(point);
    byDev.set(dev, e);
  }
  // A folder mounted over twice is walked once (the walk sees the top mount).
  return [...new Set([...byDev.values()].flatMap((e) => (e.whole !== null ? [e.whole] : e.parts)))];
}

const unescapeMount = (s: string): string => s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));

const inRange = (n: number, r: RunIdRange): boolean => n >= r.first && n < r.first + r.count;

const OPEN_DIR = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;

/** A folder's descriptor, opened through its parent's (never by a path a racing process could turn into a link). */
interface Frame {
  fd: number;
  path: string;
  names: string[];
  next: number;
}

/**
 * Inodes under `root` (not below other mounts, links not followed) whose uid or gid is one of the
 * range's. Each folder is opened from its parent's descriptor (`/proc/self/fd/<parent>/<name>`,
 * O_NOFOLLOW) and checked to be the inode its entry named, so a process that swaps a folder for a
 * link meanwhile cannot lead the walk elsewhere: that is an error, like an unreadable folder.
 * `progress` is called every 20,000 inodes.
 */
export function walkForIds(r: RunIdRange, root: string, found: Leftover[], errors: string[], progress?: (seen: number) => void): number {
  const open = (via: string, shown: string, expect?: Stats): Frame | null => {
    let fd: number;
    try {
      fd = openSync(via, OPEN_DIR);
    } catch (e) {
      errors.push(`${shown}: ${(e as Error).message}`);
      return null;
    }
    try {
      const st = fstatSync(fd);
      if (expect && (st.ino !== expect.ino || st.dev !== expect.dev)) throw new Error('it changed while the rescan read it');
      return { fd, path: shown, names: readdirSync(`/proc/self/fd/${fd}`), next: 0 };
    } catch (e) {
      closeSync(fd);
      errors.push(`${shown}: ${(e as Error).message}`);
      return null;
    }
  };
  const top = open(root, root);
  if (!top) return 0;
  const dev = fstatSync(top.fd).dev;
  const stack = [top];
  let seen = 0;
  while (stack.length > 0) {
    const f = stack[stack.length - 1]!;
    const name = f.names[f.next++];
    if (name === undefined) {
      closeSync(f.fd);
      stack.pop();
      continue;
    }
    const via = `/proc/self/fd/${f.fd}/${name}`;
    const p = join(f.path, name);
    let st: Stats;
    try {
      st = lstatSync(via);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') errors.push(`${p}: ${(e as Error).message}`);
      continue;
    }
    if (++seen % 20_000 === 0) progress?.(seen);
    if (inRange(st.uid, r)) found.push({ id: st.uid, what: p });
    else if (inRange(st.gid, r)) found.push({ id: st.gid, what: p });
    if (st.isDirectory() && st.dev === dev) {
      const child = open(via, p, st);
      if (child) stack.push(child);
    }
  }
  return seen;
}

/** System V IPC objects (a /proc/sysvipc/{shm,msg,sem} text) owned or made by the range's ids. */
export function sysvLeftovers(r: RunIdRange, kind: string, text: string): Leftover[] {
  const [head, ...rows] = text.split('\n').filter((l) => l.trim());
  if (!head) return [];
  const cols = head.trim().split(/\s+/);
  const at = ['uid', 'gid', 'cuid', 'cgid'].map((c) => cols.indexOf(c)).filter((i) => i >= 0);
  const idCol = cols.findIndex((c) => c === 'shmid' || c === 'msqid' || c === 'semid');
  const out: Leftover[] = [];
  for (const row of rows) {
    const f = row.trim().split(/\s+/);
    const id = at.map((i) => Number(f[i])).find((n) => inRange(n, r));
    if (id !== undefined) out.push({ id, what: `System V ${kind} ${f[idCol] ?? '?'}` });
  }
  return out;
}

/** Uids with keys in the kernel's keyrings (a /proc/key-users text: `<uid>: ...`). */
export function keyLeftovers(r: RunIdRange, text: string): Leftover[] {
  return text.split('\n').flatMap((l) => {
    const uid = Number(/^\s*(\d+):/.exec(l)?.[1] ?? NaN);
    return inRange(uid, r) ? [{ id: uid, what: `keys in the kernel's keyrings (/proc/key-users)` }] : [];
  });
}

/** Processes running with one of the range's ids (real, effective, saved or filesystem uid or gid). */
export function processLeftovers(r: RunIdRange, proc = '/proc'): Leftover[] {
  return (processIds(proc) ?? []).flatMap(({ pid, ids }) => {
    const id = ids.find((n) => inRange(n, r));
    return id === undefined ? [] : [{ id, what: `process ${pid}` }];
  });
}

/** Ids live runs hold now (their claims in pool.dir): handed out this epoch, they are not in the next. */
function heldIds(pool: RunIdPool): number[] {
  try {
    return readdirSync(pool.dir)
      .filter((n) => /^\d+$/.test(n))
      .map(Number);
  } catch {
    return [];
  }
}

export interface RescanReport {
  /** The epoch started (ids are handed out again from the range's first). */
  epoch: number;
  /** Ids the ended epoch had handed out (or reserved). */
  given: number;
  found: Leftover[];
  /** Ids held by live runs when the walk started or ended: skipped in the new epoch, like those found. */
  held: number[];
  /** Ids never to hand out in the new epoch (found, held, and what earlier rescans found and this one still finds). */
  tainted: number[];
  inodes: number;
  walked: string[];
}

/**
 * Looks for what the range's ids own on the host (`roots`: default every local file system) and
 * starts a new epoch of the ledger that skips them. Holds the ledger's lock throughout and marks the
 * ledger first, so no sandbox is handed an id meanwhile (a claim fails at once: NS_RUN_IDS_LOCKED).
 * The ids live runs hold when the walk starts and when it ends are skipped too: such a run may leave
 * something behind after the walk went by. A problem, and the epoch unchanged, when anything could
 * not be read.
 */
export function rescanRunIds(pool: RunIdPool, opts: { roots?: string[]; progress?: (line: string) => void } = {}): RescanReport | Problem {
  const r = pool.range;
  return withLedgerLock(pool.ledger, (): RescanReport | Problem => {
    const read = readLedger(pool.ledger);
    if ('code' in read) return read;
    const st = { ...read, rescanning: false }; // we hold the lock: a mark left here is a dead rescan's
    writeLedgerFile(pool.ledger, 'state', ledgerText({ ...st, rescanning: true }));
    const heldAtStart = heldIds(pool);
    const roots = opts.roots ?? mountsToWalk(readOr('/proc/self/mountinfo'));
    const found: Leftover[] = [];
    const errors: string[] = [];
    let inodes = 0;
    for (const root of roots) {
      opts.progress?.(`walking ${root}`);
      inodes += walkForIds(r, root, found, errors, (n) => opts.progress?.(`  ${inodes + n} inodes seen`));
    }
    for (const kind of ['shm', 'msg', 'sem']) found.push(...sysvLeftovers(r, kind, readOr(`/proc/sysvipc/${kind}`)));
    found.push(...keyLeftovers(r, readOr('/proc/key-users')), ...processLeftovers(r));
    if (errors.length > 0) {
      writeLedgerFile(pool.ledger, 'state', ledgerText(st));
      return {
        code: 'RESCAN_INCOMPLETE',
        message: `the rescan could not read ${errors.length} place(s), so the range's ids are not handed out again (what it did not see could hold a file an escaped sandbox left): ${errors.slice(0, 5).join('; ')}${errors.length > 5 ? '; ...' : ''}`,
      };
    }
    const held = [...new Set([...heldAtStart, ...heldIds(pool)])].sort((a, b) => a - b);
    const tainted = [...new Set([...found.map((f) => f.id), ...held])].sort((a, b) => a - b);
    writeLedgerFile(pool.ledger, 'tainted', tainted.map((id) => `${id}\n`).join(''));
    writeLedgerFile(pool.ledger, 'state', ledgerText({ epoch: st.epoch + 1, next: 0, rescanning: false }));
    return { epoch: st.epoch + 1, given: st.next, found, held, tainted, inodes, walked: roots };
  });
}

/** The ledger as doctor reports it: epoch, ids handed out of the range, ids kept out by the last rescan. */
export function ledgerSummary(pool: RunIdPool): { epoch: number; given: number; count: number; tainted: number } | Problem {
  const st = readLedger(pool.ledger);
  if ('code' in st) return st;
  return { epoch: st.epoch, given: st.next, count: pool.range.count, tainted: readTainted(pool.ledger).size };
}

