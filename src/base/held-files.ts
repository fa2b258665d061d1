// Kernel pseudo-files read or written again and again (a Monty worker's cgroup counters and its
// /proc/<pid> files, once or twice per run for hundreds of runs): each is opened once and then read
// from offset 0 with one pread, or written with one pwrite, instead of an open, reads and a close
// each time (measured in a hot loop: 36-50 us against 12-17 us for a run's four reads and one write).
// A /proc/<pid>/ file opened while the process is known to be ours stays bound to that process: once
// it is gone, reads fail instead of finding whatever process reuses its pid.
import { closeSync, constants, openSync, readSync, writeSync } from 'node:fs';

/** These files are generated whole on each read (seq_file): a read shorter than the buffer is all of it. */
const FIRST_BUFFER = 16 << 10;
const MAX_BUFFER = 4 << 20;

export class HeldFiles {
  private readonly fds = new Map<string, { fd: number; writable: boolean }>();
  private buf = Buffer.allocUnsafe(FIRST_BUFFER);
  private closed = false;

  /** The file's content now, or null when it cannot be opened or read (gone, refused). */
  read(path: string): string | null {
    const fd = this.fd(path, false);
    if (fd === null) return null;
    try {
      for (;;) {
        const n = readSync(fd, this.buf, 0, this.buf.length, 0);
        if (n < this.buf.length || this.buf.length >= MAX_BUFFER) return this.buf.toString('utf8', 0, n);
        this.buf = Buffer.allocUnsafe(this.buf.length * 4);
      }
    } catch {
      return null;
    }
  }

  /** Writes `value` whole; false when the file cannot be opened or the kernel refuses the value. */
  write(path: string, value: string): boolean {
    const fd = this.fd(path, true);
    if (fd === null) return false;
    try {
      writeSync(fd, value, 0);
      return true;
    } catch {
      return false;
    }
  }

  /** Closes every file; later reads and writes open nothing and fail. */
  close(): void {
    this.closed = true;
    for (const { fd } of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }

  private fd(path: string, writable: boolean): number | null {
    const held = this.fds.get(path);
    if (held && held.writable === writable) return held.fd;
    if (this.closed || held) return null; // one mode per file: a caller mixing them has a bug
    try {
      const fd = openSync(path, writable ? constants.O_WRONLY : constants.O_RDONLY); // never created, never truncated
      this.fds.set(path, { fd, writable });
      return fd;
    } catch {
      return null;
    }
  }
}
