// The Monty child: one Python program run in @pydantic/monty inside its own Node process, so a
// crash, a hang or a memory blow-up kills this process and never the service (see monty.ts).
//
// Protocol with the parent (monty.ts), which measures everything itself:
//   stdin  <- one JSON line: the job (MontyJob). Later, stdin's end means "you may exit".
//   stdout -> exactly what the program's print() wrote (nothing else is written there).
//   stderr -> a Python exception's traceback (and whatever Node itself prints if it dies).
//   fd 3   -> newline-delimited control messages: {"t":"start"} just before the program is parsed,
//             {"t":"end",...} when it finished. The Python code has no way to reach any fd.
// After "end" the process idles until the parent has read its /proc figures and closes stdin.
import { writeSync } from 'node:fs';
import { Monty, MountDir, MontyRuntimeError, MontySyntaxError, MontyTypingError, type ResourceLimits } from '@pydantic/monty';

export interface MontyJob {
  code: string;
  scriptName: string;
  /** Host dir mounted read-only at /in (null: no /in mount). */
  inDir: string | null;
  /** Host dir mounted read-write at /out. */
  outDir: string;
  /** Cumulative byte cap of writes through /out. */
  outWriteBytes: number;
  /** Wall-time budget from process start, in ms: Monty's own time limit gets what is left of it. */
  wallMs: number;
  limits: { maxMemory: number; maxRecursionDepth: number; maxAllocations: number | null };
  /** How many bytes of the last expression's JSON to send back. */
  resultBytes: number;
}

export type MontyEndMessage =
  | { t: 'end'; ok: true; resultJson: string | null; resultTruncated: boolean }
  | { t: 'end'; ok: false; kind: 'syntax' | 'runtime' | 'typing' | 'internal'; typeName: string; message: string };

/** Write all of `data` to a file descriptor, waiting out EAGAIN on a non-blocking pipe. */
function writeAll(fd: number, data: string | Buffer): void {
  let buf = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
  while (buf.length > 0) {
    try {
      const n = writeSync(fd, buf);
      buf = buf.subarray(n);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EAGAIN') throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
}

const control = (msg: object): void => writeAll(3, JSON.stringify(msg) + '\n');
const MESSAGE_CHARS = 2000;

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
  return { json: bytes.subarray(0, cap).toString('utf8'), truncated: true };
}

function run(job: MontyJob): void {
  const mounts = [new MountDir('/out', job.outDir, { mode: 'read-write', writeBytesLimit: job.outWriteBytes })];
  if (job.inDir !== null) mounts.unshift(new MountDir('/in', job.inDir, { mode: 'read-only' }));
  const limits: ResourceLimits = {
    maxMemory: job.limits.maxMemory,
    maxRecursionDepth: job.limits.maxRecursionDepth,
    // What is left of the wall budget (the parent's own timer kills at the full budget anyway).
    maxDurationSecs: Math.max(0.001, (job.wallMs - process.uptime() * 1000) / 1000),
  };
  if (job.limits.maxAllocations !== null) limits.maxAllocations = job.limits.maxAllocations;
  control({ t: 'start' });
  let end: MontyEndMessage;
  try {
    const m = new Monty(job.code, { scriptName: job.scriptName });
    // The callback must return undefined (Monty refuses any other return value).
    const value = m.run({ limits, mount: mounts, printCallback: (_stream: string, text: string): void => void writeAll(1, text) });
    const r = resultJson(value, job.resultBytes);
    end = { t: 'end', ok: true, resultJson: r.json, resultTruncated: r.truncated };
  } catch (e) {
    if (e instanceof MontyRuntimeError) {
      writeAll(2, e.display('traceback') + '\n');
      end = { t: 'end', ok: false, kind: 'runtime', typeName: e.exception.typeName, message: e.exception.message.slice(0, MESSAGE_CHARS) };
    } else if (e instanceof MontySyntaxError) {
      writeAll(2, e.display('type-msg') + '\n');
      end = { t: 'end', ok: false, kind: 'syntax', typeName: 'SyntaxError', message: e.exception.message.slice(0, MESSAGE_CHARS) };
    } else if (e instanceof MontyTypingError) {
      writeAll(2, e.displayDiagnostics('concise') + '\n');
      end = { t: 'end', ok: false, kind: 'typing', typeName: 'TypeError', message: e.message.slice(0, MESSAGE_CHARS) };
    } else {
      const err = e instanceof Error ? e : new Error(String(e));
      writeAll(2, `monty worker: ${err.name}: ${err.message}\n`);
      end = { t: 'end', ok: false, kind: 'internal', typeName: err.name.slice(0, 100), message: err.message.slice(0, MESSAGE_CHARS) };
    }
  }
  control(end);
}

// Read the job line, run it, then wait for the parent to close stdin.
let input = '';
let started = false;
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk: string) => {
  if (started) return;
  input += chunk;
  const nl = input.indexOf('\n');
  if (nl < 0) return;
  started = true;
  run(JSON.parse(input.slice(0, nl)) as MontyJob);
});
process.stdin.on('end', () => process.exit(0));
