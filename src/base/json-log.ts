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
    destination,
  );
  return {
    write: (level, event, fields = {}, msg) => (msg === undefined ? logger[level]({ event, ...fields }) : logger[level]({ event, ...fields }, msg)),
  };
}
