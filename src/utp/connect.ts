import { connect, type NatsConnection } from 'nats';

/** Thrown when NATS or JetStream is not there: the message says how to start it. */
export class NatsUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NatsUnavailableError';
  }
}

/** The URL without credentials, for messages. */
export function redactNatsUrl(url: string): string {
  return url.replace(/\/\/[^@/]*@/, '//***@');
}

/**
 * Connects and checks JetStream is enabled, within `timeoutMs` (no endless reconnect loop at
 * start-up: a service that is down is an error that names it).
 */
export async function connectNats(url: string, opts: { timeoutMs?: number; name?: string } = {}): Promise<NatsConnection> {
  let nc: NatsConnection;
  try {
    // noAsyncTraces: nats.js otherwise captures a stack trace (new Error()) for every request and
    // its timer, JetStream publishes included: two stack walks per call for a trace we never read.
    nc = await connect({ servers: url, timeout: opts.timeoutMs ?? 3000, name: opts.name ?? 'airlock', maxReconnectAttempts: -1, reconnectTimeWait: 500, noAsyncTraces: true });
  } catch (e) {
    throw new NatsUnavailableError(`NATS at ${redactNatsUrl(url)} is not reachable (${(e as Error).message}): start it with \`nats-server -js\` (JetStream enabled) or give --nats URL`);
  }
  try {
    const jsm = await nc.jetstreamManager({ timeout: opts.timeoutMs ?? 3000 });
    await jsm.getAccountInfo();
  } catch (e) {
    await nc.close().catch(() => undefined);
    throw new NatsUnavailableError(`NATS at ${redactNatsUrl(url)} has no JetStream (${(e as Error).message}): restart it with \`nats-server -js\``);
  }
  return nc;
}
