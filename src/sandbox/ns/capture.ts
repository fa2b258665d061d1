// Host-side capture of a stream: keep the first `cap` bytes, count and hash everything.
// Reading never stops (a flooding program cannot stall on a full pipe), memory stays bounded.
import { createHash, type Hash } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { CapturedStream } from '../types.js';

export class StreamCapture {
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  private total = 0;
  private readonly hash: Hash = createHash('sha256');

  constructor(private readonly cap: number) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    this.hash.update(chunk);
    if (this.kept < this.cap) {
      const take = Math.min(chunk.length, this.cap - this.kept);
      this.chunks.push(take === chunk.length ? chunk : chunk.subarray(0, take));
      this.kept += take;
    }
  }

  /** `live`: each chunk as it comes, up to the cap (what is kept is what is shown), then one `dropped`. */
  attach(stream: Readable | null, live?: (chunk: Buffer | null, afterBytes: number) => void): void {
    if (!stream) return;
    stream.on('data', (c: Buffer) => {
      const before = this.kept;
      const wasTotal = this.total;
      this.push(c);
      if (!live) return;
      if (this.kept > before) live(c.subarray(0, this.kept - before), 0);
      if (this.total > this.kept && wasTotal <= this.kept) live(null, this.kept);
    });
    stream.on('error', () => {
      /* the pipe broke because the sandbox was killed: what we have is what it wrote */
    });
  }

  result(): CapturedStream {
    return { bytes: Buffer.concat(this.chunks, this.kept), totalBytes: this.total, truncated: this.total > this.kept, sha256: this.hash.copy().digest('hex') };
  }
}
