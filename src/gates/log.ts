import { inertLine } from '../base/inert-line.js';
import { jsonLog } from '../base/json-log.js';

/** Progress and decisions of the gate service: a line per event for people, or JSON for machines. */
export interface GateLog {
  info(event: string, fields: Record<string, unknown>, line: string): void;
  warn(event: string, fields: Record<string, unknown>, line: string): void;
}

export function gateLog(format: 'text' | 'json'): GateLog {
  if (format === 'json') {
    // The same shape as the UTP service's log (src/base/json-log.ts); the person's line is `msg`.
    const log = jsonLog('airlock-gate');
    return {
      info: (event, fields, line) => log.write('info', event, fields, line),
      warn: (event, fields, line) => log.write('warn', event, fields, line),
    };
  }
  // A line names files the AI's side chose (a request's name may hold a newline): one line each, inert.
  return {
    info: (_e, _f, line) => process.stdout.write(`${inertLine(line)}\n`),
    warn: (_e, _f, line) => process.stderr.write(`${inertLine(line)}\n`),
  };
}
