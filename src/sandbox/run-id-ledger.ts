// Which sandbox uids have been given out since the range was last rescanned (src/sandbox/run-ids.ts).
//
// An id goes to one sandbox only, once per epoch: ids are handed out in order, and the next unused
// one is kept on disk, so it survives a reboot (a file an escaped run left in /var/tmp does too).
// When the range is used up, no sandbox gets an id of its own until `airlock setup --rescan-run-ids`
// has looked for what the range's ids own on the host (run-id-rescan.ts) and started a new epoch
// that skips those ids. So a file or IPC object an escaped program left behind can never make a
// later sandbox, given the same uid, reachable through it.
//
// The ledger folder (root's, 0700) holds `state` ("<epoch> <next offset>", and " rescan" while a
// rescan walks the host), `tainted` (ids never to hand out, one per line, written by the rescan) and,
// while a process reserves ids or a rescan runs, `lock` (a symlink naming its owner, base/owner.ts).
// A process reserves 64 ids at a time (one locked, flushed write per block) and reads `state`
// before and after each claim: a rescan under way stops it handing out ids (a claim fails at once),
// and a new epoch ends the blocks reserved before it.
import { closeSync, fsyncSync, linkSync, lstatSync, mkdirSync, openSync, readFileSync, readlinkSync, renameSync, symlinkSync, unlinkSync, writeSync } from 'node:fs';
import { randomInt } from 'node:crypto';
import { join } from 'node:path';
import { ownerTag, tagOwner } from '../base/owner.js';
import type { Problem } from '../base/problem.js';

export interface RunIdRange {
  first: number;
  count: number;
}

export const RUN_ID_LEDGER = '/var/lib/airlock/sandbox-ids';

/** Ids a process reserves at once: one flushed write per this many sandboxes (at most 1/16 of a small range: tests'). */
const blockOf = (r: RunIdRange): number => Math.max(1, Math.min(64, Math.floor(r.count / 16)));

export interface LedgerState {
  epoch: number;
  /** Offset in the range of the first id no process has reserved yet this epoch. */
  next: number;
  /** A rescan is walking the host (or died doing so: the next holder of the lock clears it). */
  rescanning: boolean;
}

export const ledgerText = (st: LedgerState): string => `${st.epoch} ${st.next}${st.rescanning ? ' rescan' : ''}\n`;

/** The ledger's state; a ledger never written is epoch 1 with nothing given out. */
export function readLedger(ledger: string): LedgerState | Problem {
  let text: string;
  try {
    text = readFileSync(join(ledger, 'state'), 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { epoch: 1, next: 0, rescanning: false };
    return { code: 'NS_RUN_IDS', message: `cannot read the sandbox uid ledger ${join(ledger, 'state')}: ${(e as Error).message}; nothing ran` };
  }
  const m = /^(\d+) (\d+)( rescan)?\n?$/.exec(text);
  if (!m) return { code: 'NS_RUN_IDS', message: `the sandbox uid ledger ${join(ledger, 'state')} is not "<epoch> <next>": ${JSON.stringify(text.slice(0, 40))}; nothing ran (run airlock setup --rescan-run-ids)` };
  return { epoch: Number(m[1]), next: Number(m[2]), rescanning: m[3] !== undefined };
}

/** Writes a ledger file so that a crash leaves the old content or the new, never less, and either is on disk. */
export function writeLedgerFile(ledger: string, name: string, text: string): void {
  const tmp = join(ledger, `.${name}.${ownerTag()}.${randomInt(1 << 30)}`);
  const fd = openSync(tmp, 'wx', 0o600);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, join(ledger, name));
  const dirFd = openSync(ledger, 'r');
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
}

/** The ids a rescan found owning something on the host (never handed out until a later rescan clears them). */
export function readTainted(ledger: string): Set<number> {
  try {
    return new Set(readFileSync(join(ledger, 'tainted'), 'utf8').split('\n').filter((l) => /^\d+$/.test(l)).map(Number));
  } catch {
    return new Set();
  }
}

/** The ledger folder, made root's and 0700 if missing; a problem when it is not root's alone. */
export function openLedger(ledger: string): Problem | null {
  try {
    mkdirSync(ledger, { recursive: true, mode: 0o700 });
    const st = lstatSync(ledger);
    if (!st.isDirectory() || st.uid !== (process.getuid?.() ?? 0) || (st.mode & 0o077) !== 0) {
      return { code: 'NS_RUN_IDS', message: `${ledger} is not a folder only its owner can use (uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)})` };
    }
    return null;
  } catch (e) {
    return { code: 'NS_RUN_IDS', message: `cannot make the sandbox uid ledger ${ledger}: ${(e as Error).message}` };
  }
}

const sleepMs = (ms: number): void => void Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/**
 * Runs `f` holding the ledger's lock: a symlink naming this process, made in one step. A lock whose
 * owner is dead is taken aside (renamed, then removed only if it still names that owner).
 */
export function withLedgerLock<T>(ledger: string, f: () => T): T | Problem {
  const lock = join(ledger, 'lock');
  for (let waited = 0; ; waited++) {
    try {
      symlinkSync(ownerTag(), lock);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') return { code: 'NS_RUN_IDS', message: `cannot lock the sandbox uid ledger ${ledger}: ${(e as Error).message}; nothing ran` };
    }
    let tag: string;
    try {
      tag = readlinkSync(lock);
    } catch {
      continue; // let go meanwhile
    }
    if (tagOwner(`-${tag}-`)?.alive === false) {
      const aside = `${lock}.${ownerTag()}.${randomInt(1 << 30)}`;
      try {
        renameSync(lock, aside);
        // A live owner's lock made in between goes back under its name (link fails rather than replace one).
        if (readlinkSync(aside) !== tag) linkSync(aside, lock);
        unlinkSync(aside);
      } catch {
        /* another process took it first */
      }
      continue;
    }
    // A reservation holds the lock for a flushed write; a rescan for its whole walk of the host, and
    // waiting for that would stall a service's event loop: a rescan's lock is said at once.
    const st = waited % 16 === 15 ? readLedger(ledger) : null;
    const rescanning = st !== null && !('code' in st) && st.rescanning;
    if (rescanning || waited >= 2000) {
      const why = rescanning ? ', whose rescan of the host (airlock setup --rescan-run-ids) hands out no id while it walks' : ' for 2 s';
      return { code: 'NS_RUN_IDS_LOCKED', message: `the sandbox uid ledger ${ledger} is locked by process ${tag}${why}; nothing ran: run it again when that is done` };
    }
    sleepMs(1);
  }
  try {
    return f();
  } finally {
    unlinkSync(lock);
  }
}

interface Block {
  epoch: number;
  next: number;
  end: number;
  tainted: Set<number>;
}
/** This process's reserved ids, per ledger. */
const blocks = new Map<string, Block>();

function reserve(r: RunIdRange, ledger: string): Block | Problem {
  return withLedgerLock(ledger, (): Block | Problem => {
    const read = readLedger(ledger);
    if ('code' in read) return read;
    // We hold the lock, so a rescan marked here died before it finished: its epoch goes on.
    const st = { ...read, rescanning: false };
    if (st.next >= r.count) {
      return {
        code: 'NS_RUN_IDS_USED_UP',
        message: `every one of the ${r.count} sandbox uids from ${r.first} has been given to a sandbox once since the last rescan (epoch ${st.epoch}, ${ledger}); none is given twice before a rescan has looked for what they left on the host. Nothing ran. Fix (root): airlock setup --rescan-run-ids`,
      };
    }
    const end = Math.min(st.next + blockOf(r), r.count);
    writeLedgerFile(ledger, 'state', ledgerText({ ...st, next: end }));
    return { epoch: st.epoch, next: st.next, end, tainted: readTainted(ledger) };
  });
}

/**
 * Claims the next id of the range never handed out this epoch, or a problem (the range used up, the
 * ledger unreadable or locked too long). `take` tries an id (false: a live run from before a rescan
 * holds it, try the next); `untake` lets it go again when a rescan began meanwhile (the rescan may
 * have listed the live claims before this one was made: the id waits for the next epoch instead).
 */
export function nextRunId(r: RunIdRange, ledger: string, take: (id: number) => boolean | Problem, untake: (id: number) => void): number | Problem {
  for (;;) {
    const st = readLedger(ledger);
    if ('code' in st) return st;
    let b = blocks.get(ledger);
    if (!b || st.rescanning || b.epoch !== st.epoch || b.next >= b.end) {
      const got = reserve(r, ledger);
      if ('code' in got) return got;
      blocks.set(ledger, (b = got));
    }
    const id = r.first + b.next++;
    if (b.tainted.has(id)) continue;
    const took = take(id);
    if (took === false) continue;
    if (took !== true) return took;
    const after = readLedger(ledger);
    if (!('code' in after) && !after.rescanning && after.epoch === b.epoch) return id;
    untake(id);
  }
}
