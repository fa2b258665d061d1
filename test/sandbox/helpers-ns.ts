// Shared helpers of the ns sandbox tests (real bwrap, real processes).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runNs } from '../../src/sandbox/ns/runner.js';
import type { Limits, Observation, NsRunSpec } from '../../src/sandbox/types.js';

export const LIMITS: Limits = { wallMs: 5000, cpuMs: 3000, memoryBytes: 256 << 20, pids: 64, outBytes: 1 << 20, files: 10_000, tmpBytes: 4 << 20, stdoutBytes: 64 << 10, stderrBytes: 64 << 10 };

export function freshOut(): string {
  return join(mkdtempSync(join(tmpdir(), 'airlock-ns-test-')), 'out');
}

const watchers: ((o: Observation) => void)[] = [];
/** Sees every Observation `run` returns (a suite run again another way checks how its sandboxes started). */
export function onObservation(watch: (o: Observation) => void): void {
  watchers.push(watch);
}

export async function run(argv: string[], more: Omit<Partial<NsRunSpec>, 'limits'> & { limits?: Partial<Limits> } = {}): Promise<Observation> {
  const { limits, ...rest } = more;
  const o = await runNs({ argv, outDir: freshOut(), ...rest, limits: { ...LIMITS, ...limits } });
  for (const watch of watchers) watch(o);
  return o;
}

export const py = (code: string, more: Omit<Partial<NsRunSpec>, 'limits'> & { limits?: Partial<Limits> } = {}): Promise<Observation> => run(['python3', '-c', code], more);

/** `py(code)` observed by the strace fallback instead of the host tracer. */
export async function pyUnderStrace(code: string): Promise<Observation> {
  process.env.AIRLOCK_SYSCALL_TRACER = 'strace';
  try {
    return await py(code);
  } finally {
    delete process.env.AIRLOCK_SYSCALL_TRACER;
  }
}

export const text = (o: Observation): string => `status=${o.status} reason=${o.reason} exit=${JSON.stringify(o.exit)} stdout=${o.stdout.bytes.toString().slice(0, 300)} stderr=${o.stderr.bytes.toString().slice(0, 600)}`;

/** Waits (polling every 20 ms) until `ok()`; on a timeout, says what it waited for and `state()`. */
export async function until(what: string, ok: () => boolean, state: () => unknown, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(state())}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
