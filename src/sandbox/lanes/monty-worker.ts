// A Monty worker: a long-lived Node process that runs one Python program after another in
// @pydantic/monty, each in a new Monty instance over its own /in and /out, for the host
// (monty-exec.ts), which measures everything itself. The pool (monty-pool.ts) starts it inside its
// sandbox (monty-sandbox.ts): bwrap as an unprivileged uid, no network, a read-only root, a
// seccomp allowlist, its own cgroup. Its only writable place is its staging folder (argv[2]: a
// size-capped tmpfs there), where each run gets <n>/in and <n>/out, removed when the run is over.
//
// Protocol (monty-protocol.ts): frames on stdin (job, inputs, go/abort) and on stdout (ready, start,
// prints, traceback, /out entries, end). stderr is Node's own (a crash). stdin's end means "exit".
// A frame out of order is a broken host: the worker exits (70) and the pool replaces it.
import { chmodSync, closeSync, lstatSync, mkdirSync, openSync, readdirSync, readSync, rmdirSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { Monty, MountDir, MontyRuntimeError, MontySyntaxError, MontyTypingError, type ResourceLimits } from '@pydantic/monty';
import { encodeChunked, encodeFrame, FROM_WORKER, FrameReader, MAX_PAYLOAD, safeRelativePath, TO_WORKER, type MontyEndMessage, type MontyJob } from './monty-protocol.js';

const staging = process.argv[2] ?? '/w';
const MESSAGE_CHARS = 2000;

/** Write all of `data` to a file descriptor, waiting out EAGAIN on a non-blocking pipe. */
function writeAll(fd: number, data: Buffer): void {
  let buf = data;
  while (buf.length > 0) {
    try {
      buf = buf.subarray(writeSync(fd, buf));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EAGAIN') throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
}
const send = (type: string, payload: Buffer | string = ''): void => {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  for (const f of encodeChunked(type, body)) writeAll(1, f);
};

/** JSON of the program's final value; big ints become strings, cycles and odd values a placeholder. */
function resultJson(value: unknown, cap: number): { json: string | null; truncated: boolean } {
  if (value === undefined || value === null) return { json: null, truncated: false };
  let json: string;
  try {
    json = JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v instanceof Map ? Object.fromEntries(v) : v instanceof Set ? [...v] : v)) ?? 'null';
  } catch (e) {
    json = JSON.stringify(`<unserializable result: ${(e as Error).message}>`);
  }
  const bytes = Buffer.from(json, 'utf8');
  if (bytes.length <= cap) return { json, truncated: false };
  // Cut on a character boundary so the byte count stays within the cap.
  let cut = bytes.subarray(0, cap).toString('utf8');
  while (Buffer.byteLength(cut, 'utf8') > cap) cut = cut.slice(0, -1);
  return { json: cut, truncated: true };
}

/** `inRun`: raised while Monty ran the program (any error of it is the program's doing, never the worker's). */
function failure(e: unknown, inRun = false): MontyEndMessage {
  if (e instanceof MontyRuntimeError) {
    send(FROM_WORKER.stderr, e.display('traceback') + '\n');
    return { t: 'end', ok: false, kind: 'runtime', typeName: e.exception.typeName, message: e.exception.message.slice(0, MESSAGE_CHARS), outSkipped: 0 };
  }
  if (e instanceof MontySyntaxError) {
    send(FROM_WORKER.stderr, e.display('type-msg') + '\n');
    return { t: 'end', ok: false, kind: 'syntax', typeName: 'SyntaxError', message: e.exception.message.slice(0, MESSAGE_CHARS), outSkipped: 0 };
  }
  if (e instanceof MontyTypingError) {
    send(FROM_WORKER.stderr, e.displayDiagnostics('concise') + '\n');
    return { t: 'end', ok: false, kind: 'typing', typeName: 'TypeError', message: e.message.slice(0, MESSAGE_CHARS), outSkipped: 0 };
  }
  const err = e instanceof Error ? e : new Error(String(e));
  send(FROM_WORKER.stderr, `${inRun ? 'monty' : 'monty worker'}: ${err.name}: ${err.message}\n`);
  return { t: 'end', ok: false, kind: inRun ? 'unsupported' : 'internal', typeName: err.name.slice(0, 100), message: err.message.slice(0, MESSAGE_CHARS), outSkipped: 0 };
}

/** Sends what the program left in /out, parents before children; anything not a folder or a regular file is skipped (counted). */
function sendOut(root: string): number {
  let skipped = 0;
  const buf = Buffer.allocUnsafe(MAX_PAYLOAD);
  const walk = (rel: string): void => {
    for (const name of readdirSync(rel ? join(root, rel) : root).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(root, r));
      if (st.isDirectory()) {
        send(FROM_WORKER.outDir, r);
        walk(r);
      } else if (st.isFile()) {
        send(FROM_WORKER.outFile, r);
        const fd = openSync(join(root, r), 'r');
        try {
          for (let n; (n = readSync(fd, buf, 0, buf.length, null)) > 0; ) writeAll(1, encodeFrame(FROM_WORKER.outChunk, buf.subarray(0, n)));
        } finally {
          closeSync(fd);
        }
      } else skipped++;
    }
  };
  walk('');
  return skipped;
}

interface Active {
  job: MontyJob;
  dir: string;
  received: number;
  next: number;
  fd: number | null;
}

let runs = 0;
let active: Active | null = null;

/** A broken host (a frame out of order) or a worker that cannot go on: exit, the pool replaces it. */
function protocolError(why: string): never {
  process.stderr.write(`monty worker: protocol error: ${why}\n`);
  process.exit(70);
}

function closeInput(a: Active): void {
  if (a.fd !== null) closeSync(a.fd);
  a.fd = null;
}

function run(a: Active): void {
  closeInput(a);
  const inDir = join(a.dir, 'in');
  const outDir = join(a.dir, 'out');
  let end: MontyEndMessage;
  try {
    if (a.job.inputs.length > 0) {
      for (const i of a.job.inputs) chmodSync(join(inDir, i.name), 0o444);
      chmodSync(inDir, 0o555);
    }
    const mounts = [new MountDir('/out', outDir, { mode: 'read-write', writeBytesLimit: a.job.outWriteBytes })];
    if (a.job.inputs.length > 0) mounts.unshift(new MountDir('/in', inDir, { mode: 'read-only' }));
    const limits: ResourceLimits = {
      maxMemory: a.job.limits.maxMemory,
      maxRecursionDepth: a.job.limits.maxRecursionDepth,
      // What is left of the wall budget (the host's own timer kills at the full budget anyway).
      maxDurationSecs: Math.max(0.001, (a.job.wallMs - (performance.now() - a.received)) / 1000),
    };
    if (a.job.limits.maxAllocations !== null) limits.maxAllocations = a.job.limits.maxAllocations;
    send(FROM_WORKER.start);
    try {
      const m = new Monty(a.job.code, { scriptName: a.job.scriptName });
      // The callback must return undefined (Monty refuses any other return value).
      const value = m.run({ limits, mount: mounts, printCallback: (_stream: string, text: string): void => send(FROM_WORKER.stdout, text) });
      const r = resultJson(value, a.job.resultBytes);
      end = { t: 'end', ok: true, resultJson: r.json, resultTruncated: r.truncated, outSkipped: 0 };
    } catch (e) {
      end = failure(e, true);
    }
    end.outSkipped = sendOut(outDir);
  } catch (e) {
    end = failure(e);
  }
  // Nothing of this run stays for the next one: no reference to its Monty is kept, and its folders go
  // before the end is sent. Their removal is this run's work: inside its wall time and the CPU and
  // peak memory the host reads at the end, never at the start of the next run on this worker (a
  // program that left 40,000 folders in /out made the next one time out). A worker that cannot clean
  // up ends after the end (the pool replaces it).
  active = null;
  const removed = removeRun(a.dir, a.job.inputs.length > 0);
  send(FROM_WORKER.end, JSON.stringify(end));
  if (!removed) protocolError(`cannot remove ${a.dir}`);
}

function removeRun(dir: string, hasInputs: boolean): boolean {
  try {
    if (hasInputs) {
      chmodSync(join(dir, 'in'), 0o700);
      rmSync(dir, { recursive: true, force: true });
      return true;
    }
    try {
      // The common case, an /out the program left empty: two rmdirs.
      rmdirSync(join(dir, 'out'));
      rmdirSync(dir);
    } catch {
      rmSync(dir, { recursive: true, force: true });
    }
    return true;
  } catch {
    return false;
  }
}

function onFrame(type: string, payload: Buffer): void {
  if (type === TO_WORKER.job) {
    if (active) protocolError('a job while another is active');
    const job = JSON.parse(payload.toString('utf8')) as MontyJob;
    const dir = join(staging, String(++runs));
    mkdirSync(dir, { mode: 0o700 });
    if (job.inputs.length > 0) mkdirSync(join(dir, 'in'), { mode: 0o700 });
    mkdirSync(join(dir, 'out'), { mode: 0o700 });
    active = { job, dir, received: performance.now(), next: 0, fd: null };
    return;
  }
  const a = active;
  if (!a) return protocolError(`frame ${JSON.stringify(type)} without a job`);
  if (type === TO_WORKER.input) {
    const name = payload.toString('utf8');
    if (name !== a.job.inputs[a.next]?.name || !safeRelativePath(name) || name.includes('/')) protocolError(`unexpected input ${JSON.stringify(name.slice(0, 100))}`);
    closeInput(a);
    a.next++;
    a.fd = openSync(join(a.dir, 'in', name), 'wx', 0o600);
  } else if (type === TO_WORKER.chunk) {
    if (a.fd === null) protocolError('input bytes before an input');
    writeAll(a.fd, payload);
  } else if (type === TO_WORKER.go) {
    if (a.next !== a.job.inputs.length) protocolError('go before every input');
    run(a);
  } else if (type === TO_WORKER.abort) {
    closeInput(a);
    active = null;
    if (!removeRun(a.dir, a.job.inputs.length > 0)) protocolError(`cannot remove ${a.dir}`);
  } else protocolError(`unknown frame ${JSON.stringify(type)}`);
}

// Warm the interpreter once (first-run costs stay out of every measured run), then say so.
new Monty('0', { scriptName: 'warm.py' }).run({ limits: { maxMemory: 1 << 20 } });
const reader = new FrameReader();
process.stdin.on('data', (chunk: Buffer) => {
  const r = reader.push(chunk);
  for (const f of r.frames) onFrame(f.type, f.payload);
  if (r.error) protocolError(r.error);
});
process.stdin.on('end', () => process.exit(0));
send(FROM_WORKER.ready, JSON.stringify({ pid: process.pid }));
