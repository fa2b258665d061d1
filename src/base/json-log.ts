import { hostname } from 'node:os';
import pino from 'pino';

/**
 * The one JSON log shape of every Airlock service (the folder gate, the UTP service over NATS): one
 * object per line on stdout, with pino's base fields and the same names everywhere:
 * `{"level":"info","time":"<ISO 8601>","pid":N,"hostname":"...","service":"airlock-gate","event":"...", ...fields}`.
 * `level` is a name (info, warn, error), not pino's number, so people and jq read it alike.
 */
export type ServiceName = 'airlock-gate' | 'airlock-utp';
export type LogLevel = 'info' | 'warn' | 'error';

export interface JsonLog {
  write(level: LogLevel, event: string, fields?: Record<string, unknown>, msg?: string): void;
}

export function jsonLog(service: ServiceName, destination?: pino.DestinationStream): JsonLog {
  const logger = pino(
    {
      base: { pid: process.pid, hostname: hostname(), service },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination ?? bufferedStdout(),
  );
  return {
    write: (level, event, fields = {}, msg) => (msg === undefined ? logger[level]({ event, ...fields }) : logger[level]({ event, ...fields }, msg)),
  };
}

/**
 * Stdout in blocks of up to 4 KB, flushed at exit and within 100 ms of a line: a line written on
 * its own (handed to libuv's threads, then its wake-ups) costs twice the CPU or more (bench:log).
 * A SIGKILL loses at most the last 100 ms of lines; the audit log is where durability lives.
 */
function bufferedStdout(): pino.DestinationStream {
  const out = pino.destination({ dest: 1, minLength: 4096, sync: false });
  let unflushed = false;
  const write = out.write.bind(out);
  out.write = (line: string) => {
    unflushed = true;
    return write(line);
  };
  setInterval(() => {
    if (!unflushed) return;
    unflushed = false;
    try {
      out.flush();
    } catch {
      // stdout is gone (closed, broken pipe): there is nowhere to write, and the service goes on.
    }
  }, 100).unref();
  return out;
}
