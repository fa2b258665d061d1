import pino from 'pino';

/** Progress and decisions of the gate service: a line per event for people, or JSON for machines. */
export interface GateLog {
  info(event: string, fields: Record<string, unknown>, line: string): void;
  warn(event: string, fields: Record<string, unknown>, line: string): void;
}

export function gateLog(format: 'text' | 'json'): GateLog {
  if (format === 'json') {
    const logger = pino({ base: { service: 'airlock-gate' }, timestamp: pino.stdTimeFunctions.isoTime });
    return {
      info: (event, fields) => logger.info({ event, ...fields }),
      warn: (event, fields) => logger.warn({ event, ...fields }),
    };
  }
  return {
    info: (_e, _f, line) => process.stdout.write(`${line}\n`),
    warn: (_e, _f, line) => process.stderr.write(`${line}\n`),
  };
}
