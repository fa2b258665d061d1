// A run's folder in the workspace: runs/<sandbox id>/ holding the Sandbox Result's partial file,
// which says whose run it is until the result replaces it, and out/ (the lane's copy of /out), which
// the lane makes only when the program left something there.
//
// Making a folder or a file is a new inode, a disk's slowest metadata step (15-300 us of CPU each on
// this project's ext4 VM, varying from minute to minute; a rename 6-10 us). A one-shot command makes
// them while its sandbox starts. A service (keepRunFoldersReady) keeps READY_DEPTH folders made ahead
// per workspace, runs/.ready-<owner tag>-<random>/, and a run takes one with one rename; another is
// made after the run, off every request's path. One would not do: a run that follows another at once
// came while its folder was still being made (55 % of back-to-back Monty runs did). A `.ready-`
// folder is never a run: `airlock runs` skips names with a leading dot, and recovery finds no result
// in it. Its name carries its process (base/owner.ts): a service removes its own when it closes or
// exits, and the next service removes those of a process that is gone.
import { readdirSync, renameSync, rmSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { ownerStamp, ownerTag, tagOwner } from '../base/owner.js';
import { stageFile, type StagedFile } from '../base/staged-file.js';

/** In each run folder that ran: the Sandbox Result, complete (it appears by a rename). */
export const SANDBOX_RESULT_FILE = 'sandbox-result.json';
/** The folder the lane makes and fills with the run's /out, when the program left anything there. */
export const OUT_FOLDER = 'out';
const READY_PREFIX = '.ready-';
/** Folders kept made ahead per workspace: two in flight and the next one's, with one to spare. */
export const READY_DEPTH = 4;

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
const ready = new Map<string, ReadyFolder[]>();
const swept = new Set<string>();
let exitHook = false;

/** A service's choice: keep one run folder made ahead in each workspace it runs in (off: drops them). */
export function keepRunFoldersReady(on: boolean): void {
  keepReady = on;
  if (!on) dropReadyRunFolders();
}

/** Removes this process's folders made ahead (a service's close; also done at exit). */
function dropReadyRunFolders(): void {
  for (const [runsDir, fs] of ready) {
    ready.delete(runsDir);
    fs.forEach(discard);
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

/** After a run: when a service keeps folders ready, start making those this workspace lacks. */
export function refillRunFolder(runsDir: string): void {
  if (!keepReady) return;
  if (!swept.has(runsDir)) {
    swept.add(runsDir);
    sweepDeadOwners(runsDir);
  }
  if (!exitHook) {
    exitHook = true;
    process.once('exit', dropReadyRunFolders);
  }
  let fs = ready.get(runsDir);
  if (!fs) ready.set(runsDir, (fs = []));
  while (fs.length < READY_DEPTH) {
    const f: ReadyFolder = { dir: join(runsDir, `${READY_PREFIX}${ownerTag()}-${randomBytes(4).toString('hex')}`), result: null, made: false };
    fs.push(f);
    void makeReady(runsDir, f);
  }
}

/** Makes the folder and its partial result, then keeps it, or removes it (dropped meanwhile, or not all made). */
async function makeReady(runsDir: string, f: ReadyFolder): Promise<void> {
  let ok = false;
  try {
    await mkdir(f.dir, { mode: 0o700 });
    f.result = await stageResult(f.dir);
    ok = true;
  } catch {
    /* not made: removed below */
  }
  // One synchronous step from here on: a run can take the folder only once it is kept.
  f.made = true;
  const fs = ready.get(runsDir);
  const i = fs?.indexOf(f) ?? -1;
  if (ok && i >= 0) return;
  // The next run makes its own folder (and says why if that fails too).
  if (i >= 0) fs?.splice(i, 1);
  discard(f);
}

const stageResult = (dir: string): Promise<StagedFile> => stageFile(join(dir, SANDBOX_RESULT_FILE), 0o644, ownerStamp() + '\n');

function takeReady(runsDir: string, runDir: string): StagedFile | null {
  const fs = ready.get(runsDir);
  const i = fs?.findIndex((x) => x.made && x.result) ?? -1;
  if (!fs || i < 0) return null; // none, or all still being made: this run makes its own
  const f = fs.splice(i, 1)[0] as ReadyFolder;
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
