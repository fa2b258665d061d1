import { captureStream, DESTINATION_RE, SIGNALS, utcStamp, standardSafetyNotes, type SignalName, type ToolResult, type ToolResultArtifact } from '../contracts/tool-result.js';
import type { Action } from '../action/action.js';
import type { Judgement } from '../judge/judge.js';
import { contactedDestinations } from '../sandbox/egress/records.js';
import type { Observation } from '../sandbox/types.js';
import { sha256Hex } from '../base/hash.js';

/** A file the host keeps for the result: a /out output or a full stream. */
export interface StoredArtifact extends ToolResultArtifact {
  /** Bytes to write into the artifact store (streams only; /out files are copied by the caller). */
  bytes?: Buffer;
}

const utcSeconds = (d: Date): string => d.toISOString().replace(/\.\d{3}Z$/, 'Z');

/** Quote an argv for display the way a POSIX shell would read it back. */
export function displayArgv(argv: string[]): string {
  return argv.map((a) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

function uniqueName(base: string, taken: Set<string>): string {
  let name = base;
  for (let i = 1; taken.has(name); i++) name = base.replace(/(\.txt)$/, `-${i}$1`);
  taken.add(name);
  return name;
}

/**
 * The Tool Result (TS-*.md) for a TR run, filled only from what the host measured. Streams go in
 * as excerpts; when cut, the kept bytes are stored as an artifact and the excerpt names it.
 */
export function buildToolResult(args: {
  action: Action;
  argv: string[];
  obs: Observation;
  judgement: Judgement;
  backend: string;
  now?: Date;
}): { result: ToolResult; artifacts: StoredArtifact[] } {
  const { action, obs, judgement } = args;
  const created = utcSeconds(args.now ?? new Date());
  const outputs: StoredArtifact[] = (obs.fs.out ?? [])
    .filter((c) => c.change === 'added' && c.type === 'file' && c.sha256After)
    .map((c) => ({ path: c.path.replace(/^\/out\//, ''), sha256: c.sha256After as string }));
  const taken = new Set(outputs.map((o) => o.path));
  const artifacts: StoredArtifact[] = [...outputs];
  const stream = (name: 'stdout' | 'stderr') => {
    const kept = obs[name].bytes;
    const sha = sha256Hex(kept);
    const artifact = uniqueName(`airlock-${name}.txt`, taken);
    const excerpt = captureStream(kept.toString('utf8'), artifact);
    if (excerpt.truncated || obs[name].truncated) {
      artifacts.push({ path: artifact, sha256: sha, description: `full ${name} as kept by the host (${kept.length} of ${obs[name].totalBytes} bytes)`, bytes: kept });
      if (!excerpt.truncated) excerpt.truncated = { total_lines: excerpt.lines.length, artifact };
    }
    return { excerpt, sha };
  };
  const out = stream('stdout');
  const err = stream('stderr');
  const signal = obs.exit.signal && obs.exit.signal in SIGNALS ? (obs.exit.signal as SignalName) : undefined;
  const exitCode = obs.exit.code ?? (signal ? 128 + SIGNALS[signal] : -1);
  // From the host proxy's record: every destination actually contacted (allowed and connected).
  const destinations = contactedDestinations(obs.network).filter((d) => DESTINATION_RE.test(d)).slice(0, 256);
  const network: Pick<ToolResult, 'network_used' | 'network_destinations'> = destinations.length > 0 ? { network_used: 'allowlist', network_destinations: destinations } : { network_used: 'none', network_destinations: [] };
  const unexpected = [...judgement.unexpected];
  for (const n of ['stdout', 'stderr'] as const) {
    if (obs[n].truncated) unexpected.push(`${n} was ${obs[n].totalBytes} bytes; the host kept the first ${obs[n].bytes.length}`);
  }
  const produced = outputs.map((o) => `/out/${o.path}`);
  const summary = [
    `Ran \`${displayArgv(args.argv)}\` for ${action.id} in the Airlock sandbox (${args.backend}).`,
    `Status ${obs.status}${obs.exit.code !== null ? ` (exit code ${obs.exit.code})` : signal ? ` (signal ${signal})` : ''}: ${obs.reason}; ${(obs.wallMs / 1000).toFixed(3)} s wall time.`,
    `Outputs: ${produced.length > 0 ? produced.join(', ') : 'none'}. Host verdict: ${judgement.verdict}.`,
  ].join('\n');
  const result: ToolResult = {
    result_id: `TS-${utcStamp(created)}-${action.id}`,
    created_utc: created,
    request_id: action.id,
    executor: 'airlock',
    backend: args.backend,
    exit_code: exitCode,
    ...(signal && obs.exit.code === null ? { signal } : {}),
    ...(obs.status === 'TIMEOUT' ? { timed_out: true } : {}),
    runtime_sec: Math.round(obs.wallMs) / 1000,
    ...network,
    artifacts: artifacts.map(({ path, sha256, description }) => ({ path, sha256, ...(description ? { description } : {}) })),
    stdout_sha256: out.sha,
    stderr_sha256: err.sha,
    summary,
    provenance: {
      command: displayArgv(args.argv),
      backend: args.backend,
      limits: {
        cpu: Math.round((action.limits.cpuMs / action.limits.wallMs) * 100) / 100,
        memory_mb: Math.round(action.limits.memoryBytes / 1024 / 1024),
        time_sec: action.limits.wallMs / 1000,
      },
    },
    stdout: out.excerpt,
    stderr: err.excerpt,
    safety_notes: standardSafetyNotes(network, unexpected),
  };
  return { result, artifacts };
}
