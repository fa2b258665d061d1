// The wire between the host (monty-exec.ts) and a Monty worker (monty-worker.ts): length-prefixed
// frames on the worker's stdin (jobs) and stdout (everything the worker says). One channel each way,
// so a run's prints, its /out files and its end arrive in the order the worker wrote them.
//
// A frame is 1 type byte, a 4-byte big-endian payload length, then the payload (at most MAX_PAYLOAD).
// The Python program cannot write to any file descriptor (Monty has no such API): only the worker's
// own code writes frames. The host still treats every frame as untrusted (a worker whose interpreter
// was escaped would write what it likes): types are checked against the run's state, sizes against
// MAX_PAYLOAD and the run's limits, JSON against the shapes below.

/** Host -> worker. */
export const TO_WORKER = {
  /** The job (MontyJob as JSON); the inputs and the go follow. */
  job: 'J',
  /** An input file begins: the payload is its name. Its bytes follow as `chunk` frames. */
  input: 'I',
  chunk: 'C',
  /** Every input was sent and checked: run the program. */
  go: 'G',
  /** The inputs did not check out: drop the job (nothing ran). */
  abort: 'A',
} as const;

/** Worker -> host. */
export const FROM_WORKER = {
  /** The worker loaded Monty and waits for jobs (JSON: { pid }). */
  ready: 'r',
  /** The program is about to be parsed. */
  start: 's',
  /** The program's print() output, and a Python traceback. */
  stdout: 'o',
  stderr: 'e',
  /** After the program: a directory left in /out (payload: its path relative to /out). */
  outDir: 'd',
  /** A regular file left in /out begins (payload: its relative path); its bytes follow as `outChunk`. */
  outFile: 'f',
  outChunk: 'c',
  /** The run is over (MontyEndMessage as JSON). */
  end: 'x',
} as const;

export const HEADER_BYTES = 5;
/** Largest payload either side writes or accepts (prints and files are cut into frames of this size). */
export const MAX_PAYLOAD = 1 << 20;

export interface MontyJob {
  code: string;
  scriptName: string;
  /** Input files (name, size) that follow as `input` + `chunk` frames, in this order. */
  inputs: { name: string; bytes: number }[];
  /** Cumulative byte cap of writes through /out (Monty's mount cap). */
  outWriteBytes: number;
  /** Wall-time budget from the job's hand-over, in ms: Monty's own time limit gets what is left of it. */
  wallMs: number;
  limits: { maxMemory: number; maxRecursionDepth: number; maxAllocations: number | null };
  /** How many bytes of the last expression's JSON to send back. */
  resultBytes: number;
}

export type MontyEndMessage =
  | { t: 'end'; ok: true; resultJson: string | null; resultTruncated: boolean; outSkipped: number }
  | { t: 'end'; ok: false; kind: MontyErrorKind; typeName: string; message: string; outSkipped: number };

export function encodeFrame(type: string, payload: Buffer | string = ''): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  if (body.length > MAX_PAYLOAD) throw new Error(`monty frame ${type}: payload of ${body.length} bytes is over ${MAX_PAYLOAD}`);
  const out = Buffer.allocUnsafe(HEADER_BYTES + body.length);
  out.write(type, 0, 1, 'latin1');
  out.writeUInt32BE(body.length, 1);
  body.copy(out, HEADER_BYTES);
  return out;
}

/** `data` as frames of `type`, each at most MAX_PAYLOAD bytes (at least one frame, even when empty). */
export function encodeChunked(type: string, data: Buffer): Buffer[] {
  if (data.length <= MAX_PAYLOAD) return [encodeFrame(type, data)];
  const out: Buffer[] = [];
  for (let at = 0; at < data.length; at += MAX_PAYLOAD) out.push(encodeFrame(type, data.subarray(at, at + MAX_PAYLOAD)));
  return out;
}

export interface Frame {
  type: string;
  payload: Buffer;
}

/**
 * Cuts a byte stream into frames. `push` returns the complete frames so far, or an error (a length
 * over MAX_PAYLOAD): a stream that broke framing once cannot be trusted again, so the reader stays broken.
 */
export class FrameReader {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private broken: string | null = null;

  push(chunk: Buffer): { frames: Frame[]; error: string | null } {
    if (this.broken) return { frames: [], error: this.broken };
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    const frames: Frame[] = [];
    while (this.pendingBytes >= HEADER_BYTES) {
      if (this.pending.length > 1) this.pending = [Buffer.concat(this.pending, this.pendingBytes)];
      const buf = this.pending[0]!;
      const len = buf.readUInt32BE(1);
      if (len > MAX_PAYLOAD) {
        this.broken = `a frame announced ${len} bytes (more than ${MAX_PAYLOAD})`;
        return { frames, error: this.broken };
      }
      if (buf.length < HEADER_BYTES + len) break;
      frames.push({ type: buf.toString('latin1', 0, 1), payload: buf.subarray(HEADER_BYTES, HEADER_BYTES + len) });
      const rest = buf.subarray(HEADER_BYTES + len);
      this.pending = rest.length > 0 ? [rest] : [];
      this.pendingBytes = rest.length;
    }
    return { frames, error: null };
  }

  /** Bytes received that do not make a whole frame yet. */
  get buffered(): number {
    return this.pendingBytes;
  }
}

/**
 * How a run failed: the program's own Python error (syntax, runtime, typing); `unsupported`, an error
 * Monty raised while running the program that is none of its Python ones (an unknown external
 * function such as `dir()`, a feature it lacks): the program's doing; `internal`, the worker's own
 * failure outside the program's run (its set-up, reading /out).
 */
export type MontyErrorKind = 'syntax' | 'runtime' | 'typing' | 'unsupported' | 'internal';
const KINDS = new Set<string>(['syntax', 'runtime', 'typing', 'unsupported', 'internal']);
const MESSAGE_CHARS = 2000;

/** The end message, checked field by field (a worker is not trusted to send a well-formed one); null if it is not one. */
export function parseEndMessage(payload: Buffer, resultBytes: number): MontyEndMessage | null {
  let m: Record<string, unknown>;
  try {
    m = JSON.parse(payload.toString('utf8')) as Record<string, unknown>;
  } catch {
    return null;
  }
  if (typeof m !== 'object' || m === null || m.t !== 'end') return null;
  const skipped = m.outSkipped;
  if (typeof skipped !== 'number' || !Number.isSafeInteger(skipped) || skipped < 0) return null;
  if (m.ok === true) {
    const r = m.resultJson;
    if (!(r === null || (typeof r === 'string' && Buffer.byteLength(r, 'utf8') <= resultBytes)) || typeof m.resultTruncated !== 'boolean') return null;
    return { t: 'end', ok: true, resultJson: r, resultTruncated: m.resultTruncated, outSkipped: skipped };
  }
  if (m.ok !== false || typeof m.kind !== 'string' || !KINDS.has(m.kind) || typeof m.typeName !== 'string' || typeof m.message !== 'string') return null;
  return { t: 'end', ok: false, kind: m.kind as MontyErrorKind, typeName: m.typeName.slice(0, 100), message: m.message.slice(0, MESSAGE_CHARS), outSkipped: skipped };
}

/** An input's name or a path under /out as the worker may use it: relative, no empty, `.` or `..` part, no NUL. */
export function safeRelativePath(p: string): boolean {
  if (p.length === 0 || p.length > 4096 || p.startsWith('/') || p.includes('\0')) return false;
  return p.split('/').every((part) => part !== '' && part !== '.' && part !== '..' && Buffer.byteLength(part) <= 255);
}
