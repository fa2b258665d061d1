// A run's folder in the workspace: runs/<sandbox id>/ holding out/ (the lane's copy of /out) and the
// Sandbox Result's partial file, which says whose run it is until the result replaces it.
//
// Making them is three new inodes, and a new inode is a disk's slowest metadata step (0.1-1.5 ms each
// on this project's ext4 VM; a rename 0.02 ms). A one-shot command makes them while its sandbox
// starts. A service (keepRunFoldersReady) keeps one folder made ahead per workspace,
// runs/.ready-<owner tag>-<random>/, and a run takes it with one rename; the next is made after the
// run, off every request's path. A `.ready-` folder is never a run: `airlock runs` skips names with
// a leading dot, and recovery finds no result in it. Its name carries its process (base/owner.ts):
// a service removes its own when it closes or exits, and the next service removes those of a
// process that is gone.
import { readdirSync, renameSync, rmSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { ownerStamp, ownerTag, tagOwner } from '../base/owner.js';
import { stageFile, type StagedFile } from '../base/staged-file.js';

/** In each run folder that ran: the Sandbox Result, complete (it appears by a rename). */
export const SANDBOX_RESULT_FILE = 'sandbox-result.json';
/** The folder the lane fills with the run's /out. */
export const OUT_FOLDER = 'out';
const READY_PREFIX = '.ready-';

export interface RunFolder {
  runDir: string;
  /** Settles once runDir exists; rejects if it could not be made (the lane then runs nothing). */
  made: Promise<void>;
  /** The Sandbox Result's partial file, holding this process's owner stamp. */
  result: Promise<StagedFile>;
}

interface ReadyFolder {
  dir: string;
  /** The partial result's file, once made. */
  result: StagedFile | null;
  /** Making it has ended (whether or not all of it could be made). */
  made: boolean;
}

let keepReady = false;
const ready = new Map<string, ReadyFolder>();
const swept = new Set<string>();
let exitHook = false;

/** A service's choice: keep one run folder made ahead in each workspace it runs in (off: drops them). */
export function keepRunFoldersReady(on: boolean): void {
  keepReady = on;
  if (!on) dropReadyRunFolders();
}

/** Removes this process's folders made ahead (a service's close; also done at exit). */
function dropReadyRunFolders(): void {
  for (const [runsDir, f] of ready) {
    ready.delete(runsDir);
    discard(f);
  }
}

/** runs/<sandboxId>: the folder made ahead when one is ready (one rename), else made now, asynchronously. */
export function openRunFolder(runsDir: string, sandboxId: string): RunFolder {
  const runDir = join(runsDir, sandboxId);
  const taken = takeReady(runsDir, runDir);
  if (taken) return { runDir, made: Promise.resolve(), result: Promise.resolve(taken.movedTo(join(runDir, SANDBOX_RESULT_FILE))) };
  const made = mkdir(runDir, { recursive: true, mode: 0o700 }).then(() => undefined);
  return { runDir, made, result: made.then(() => stageResult(runDir)) };
}

/** After a run: when a service keeps folders ready, start making the next one for this workspace. */
export function refillRunFolder(runsDir: string): void {
  if (!keepReady || ready.has(runsDir)) return;
  if (!swept.has(runsDir)) {
    swept.add(runsDir);
    sweepDeadOwners(runsDir);
  }
  const f: ReadyFolder = { dir: join(runsDir, `${READY_PREFIX}${ownerTag()}-${randomBytes(4).toString('hex')}`), result: null, made: false };
  ready.set(runsDir, f);
  if (!exitHook) {
    exitHook = true;
    process.once('exit', dropReadyRunFolders);
  }
  void makeReady(runsDir, f);
}

/** Makes the folder, its out/ and its partial result, then keeps it, or removes it (dropped meanwhile, or not all made). */
async function makeReady(runsDir: string, f: ReadyFolder): Promise<void> {
  let ok = false;
  try {
    await mkdir(f.dir, { mode: 0o700 });
    const [out, result] = await Promise.allSettled([mkdir(join(f.dir, OUT_FOLDER)), stageResult(f.dir)]);
    if (result.status === 'fulfilled') f.result = result.value;
    ok = out.status === 'fulfilled' && result.status === 'fulfilled';
  } catch {
    /* not made: removed below */
  }
  // One synchronous step from here on: a run can take the folder only once it is kept.
  f.made = true;
  if (ok && ready.get(runsDir) === f) return;
  // The next run makes its own folder (and says why if that fails too).
  if (ready.get(runsDir) === f) ready.delete(runsDir);
  discard(f);
}

const stageResult = (dir: string): Promise<StagedFile> => stageFile(join(dir, SANDBOX_RESULT_FILE), 0o644, ownerStamp() + '\n');

function takeReady(runsDir: string, runDir: string): StagedFile | null {
  const f = ready.get(runsDir);
  if (!f?.made || !f.result) return null; // none, or still being made: this run makes its own
  ready.delete(runsDir);
  try {
    renameSync(f.dir, runDir);
    return f.result;
  } catch {
    discard(f);
    return null;
  }
}

/** Closes and removes a folder made ahead (one still being made is removed when that ends). */
function discard(f: ReadyFolder): void {
  if (!f.made) return;
  f.result?.discard();
  rmSync(f.dir, { recursive: true, force: true });
}

/** Folders made ahead by processes that are gone (a crash, a kill): removed, never a live one's. */
function sweepDeadOwners(runsDir: string): void {
  let names: string[];
  try {
    names = readdirSync(runsDir);
  } catch {
    return; // no runs folder yet: nothing to sweep
  }
  for (const n of names) if (n.startsWith(READY_PREFIX) && tagOwner(n)?.alive === false) rmSync(join(runsDir, n), { recursive: true, force: true });
}
