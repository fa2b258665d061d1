// The host's side of a run's /out: the worker sends what the program left there (folders, then
// files as byte chunks) and the host writes it into the run's outDir itself, within the run's caps.
// The worker is not trusted here: every path is checked (relative, no `..`, its parent already
// received), nothing is created twice, and the files and bytes stop at the run's `files` and
// `diskBytes` limits (what is past them is read and dropped, and the limit is reported exceeded).
// outDir is made by the host at the first entry (or is an empty folder the caller made); only the
// host creates entries in it, with O_EXCL and without following links, so nothing the worker sends
// can lead a write outside it.
import { closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { makeOutDir } from '../ns/outputs.js';
import { safeRelativePath } from './monty-protocol.js';

export class OutReceiver {
  private readonly dirs = new Set<string>(['.']);
  private readonly seen = new Set<string>();
  private fd: number | null = null;
  /** Folders and files the worker announced (those past the file cap included). */
  entries = 0;
  /** Bytes of regular files written (the run's disk use). */
  bytes = 0;
  /** Limits the worker's /out went past (nothing past them was written). */
  readonly exceeded = new Set<'files' | 'outBytes'>();
  /** A broken stream (a bad path, a duplicate, bytes without a file): the worker is not to be trusted. */
  error: string | null = null;
  /** The host could not make outDir (a full disk, the run folder gone): nothing more is written, the worker is not to blame. */
  hostError: string | null = null;
  /** outDir exists: made here at the first entry (or an empty folder the caller made). */
  rootMade = false;

  constructor(
    private readonly root: string,
    private readonly caps: { files: number; bytes: number },
  ) {}

  private entry(rel: string): boolean {
    this.closeFile();
    if (this.error) return false;
    if (!safeRelativePath(rel) || this.seen.has(rel) || !this.dirs.has(rel.includes('/') ? dirname(rel) : '.')) {
      this.error = `the worker sent an invalid /out path ${JSON.stringify(rel.slice(0, 200))}`;
      return false;
    }
    this.seen.add(rel);
    if (++this.entries > this.caps.files) {
      this.exceeded.add('files');
      return false;
    }
    if (this.hostError) return false;
    if (!this.rootMade) {
      try {
        makeOutDir(this.root);
      } catch (e) {
        this.hostError = `the host could not make ${this.root} for /out: ${(e as Error).message}; nothing of /out was kept`;
        return false;
      }
      this.rootMade = true;
    }
    return true;
  }

  dir(rel: string): void {
    if (!this.entry(rel)) return;
    mkdirSync(join(this.root, rel), { mode: 0o755 });
    this.dirs.add(rel);
  }

  file(rel: string): void {
    if (!this.entry(rel)) return;
    this.fd = openSync(join(this.root, rel), 'wx', 0o644);
  }

  chunk(data: Buffer): void {
    if (this.error || this.hostError || this.exceeded.size > 0) return;
    if (this.fd === null) {
      this.error = 'the worker sent /out bytes outside a file';
      return;
    }
    const room = this.caps.bytes - this.bytes;
    const take = Math.min(room, data.length);
    if (take > 0) writeSync(this.fd, data, 0, take);
    this.bytes += take;
    if (take < data.length) this.exceeded.add('outBytes');
  }

  private closeFile(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  close(): void {
    this.closeFile();
  }
}
