import type { Result } from '../base/problem.js';
import { SANDBOX_RESULT_MAX_BYTES, sandboxResultContract, validateSandboxResult, type DiffEntry, type SandboxResult } from '../contracts/sandbox-result.js';
import type { Action } from '../action/action.js';
import { networkAttempts, type Judgement } from '../judge/judge.js';
import type { FsChange, Observation } from '../sandbox/types.js';

const TYPE: Record<FsChange['type'], DiffEntry['type']> = {
  file: 'file',
  dir: 'dir',
  symlink: 'symlink',
  hardlink: 'hardlink',
  fifo: 'fifo',
  socket: 'socket',
  'char-device': 'char_device',
  'block-device': 'block_device',
};
const HASHED = new Set(['file', 'hardlink', 'symlink']);

/**
 * Bytes of each stream the Sandbox Result itself carries (the rest of what the host kept goes to
 * the run's artifacts/): a flood of output must not push the document past its size limit. Two
 * streams of this, JSON-escaped at worst 6 bytes per byte, leave room for the diff and the rest.
 */
const SANDBOX_RESULT_STREAM_BYTES = 64 * 1024;

/**
 * A path the program chose, as the contract can carry it: a name with control characters has them
 * (and its backslashes) written as `\xNN`; a path over 4,096 characters is cut with a marker. Both
 * kinds are BLOCKed by the judge, so promotion never reads these forms back as real paths.
 */
function printablePath(p: string): string {
  // eslint-disable-next-line no-control-regex
  const shown = /[\u0000-\u001f\u007f]/.test(p) ? p.replace(/[\u0000-\u001f\u007f\\]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`) : p;
  return shown.length <= MAX_PATH_CHARS ? shown : `${shown.slice(0, MAX_PATH_CHARS - 40)}...[${shown.length} characters]`;
}
const MAX_PATH_CHARS = 4096;

/** Printed paths are unique in a diff: a hostile name whose printed form equals another entry's gets a suffix. */
function uniquePaths(diff: SandboxResult['filesystem_diff']): void {
  const seen = new Set<string>();
  for (const e of [...diff.added, ...diff.modified, ...diff.deleted]) {
    let p = e.path;
    for (let n = 2; seen.has(p); n++) p = `${e.path} (#${n})`;
    e.path = p;
    seen.add(p);
  }
}

function entry(c: FsChange, tombstone: (sha: string) => string): DiffEntry {
  const type = c.nlink && c.nlink > 1 && c.type === 'file' ? 'hardlink' : TYPE[c.type];
  const e: DiffEntry = { path: printablePath(c.path), type, mode: (c.mode & 0o7777).toString(8).padStart(4, '0'), size_bytes: c.size };
  if (HASHED.has(type)) {
    if (c.change !== 'added') e.sha256_before = c.sha256Before ?? null;
    if (c.change !== 'deleted') e.sha256_after = c.sha256After ?? null;
  }
  if (type === 'symlink') e.link_target = printablePath(c.linkTarget ?? '');
  // A hard link names another of its paths when one is in the diff; else it says how many names it has.
  if (type === 'hardlink') {
    if (c.hardlinkOf?.[0]) e.link_target = printablePath(c.hardlinkOf[0]);
    else e.link_count = Math.max(2, c.nlink ?? 2);
  }
  if (c.change === 'deleted') e.tombstone = c.sha256Before ? tombstone(c.sha256Before) : `lower:${c.path}`;
  return e;
}

/**
 * The Sandbox Result (sandbox-result.schema.md) of one run, from the host's observation and the
 * judge's comparison. `tombstone` names where the pre-image of a deleted file is kept.
 */
export function buildSandboxResult(args: {
  action: Action;
  sandboxId: string;
  obs: Observation;
  judgement: Judgement;
  tombstone?: (sha256: string) => string;
}): SandboxResult {
  const { action, obs, judgement } = args;
  const tomb = args.tombstone ?? ((sha: string) => `sha256:${sha}`);
  const unmeasured: Record<string, string> = {};
  const res = obs.resources;
  const resources: SandboxResult['resources'] = {
    cpu_user_ms: res.cpuUserMs,
    cpu_system_ms: res.cpuSystemMs,
    peak_memory_bytes: res.peakMemoryBytes,
    disk_write_bytes: res.diskWriteBytes,
    network_bytes_in: res.networkBytesIn,
    network_bytes_out: res.networkBytesOut,
    wall_time_ms: Math.round(obs.wallMs),
  };
  const fieldOf: Record<string, keyof SandboxResult['resources']> = {
    cpuUserMs: 'cpu_user_ms', cpuSystemMs: 'cpu_system_ms', peakMemoryBytes: 'peak_memory_bytes', diskWriteBytes: 'disk_write_bytes',
    networkBytesIn: 'network_bytes_in', networkBytesOut: 'network_bytes_out',
  };
  for (const [k, f] of Object.entries(fieldOf)) {
    const v = resources[f];
    if (v === null) unmeasured[`resources.${f}`] = res.unmeasured[k as keyof typeof res.unmeasured] ?? 'not measured on this host';
    else resources[f] = Math.round(v);
  }

  const se = obs.sideEffects;
  let side_effects: SandboxResult['side_effects'];
  if (se) {
    const attempts = networkAttempts(se, obs.network);
    // Requests to the host proxy, allowed or refused (the proxy's record), then raw attempts around it.
    type Attempt = NonNullable<SandboxResult['side_effects']['network_attempts']>[number];
    const proxied: Attempt[] = (obs.network?.connections ?? []).map((c) => ({ address: c.host.slice(0, 256) || '(none)', port: c.port, protocol: 'tcp', allowed: c.allowed }));
    const signals = new Map<string, number>();
    for (const s of se.signalsSent) if (/^SIG[A-Z0-9+-]{1,16}$/.test(s.signal)) signals.set(s.signal, (signals.get(s.signal) ?? 0) + 1);
    side_effects = {
      processes_spawned: se.processesSpawned.count,
      executables: se.processesSpawned.executables.map((e) => e.path),
      signals_sent: [...signals].map(([signal, count]) => ({ signal, count })),
      network_attempts: [...proxied, ...attempts.map((n): Attempt => ({
        address: n.family === 'unix' ? (n.path ?? '(unnamed)') : (n.address ?? '(unknown)'),
        port: n.port ?? 0,
        protocol: n.family === 'unix' ? 'unix' : n.protocol === 'tcp' || n.protocol === 'udp' || n.protocol === 'icmp' ? n.protocol : 'other',
        allowed: false,
      }))].slice(0, 10_000),
      privileged_syscalls: se.privilegedSyscalls.map((p) => ({ name: p.name, count: p.count, denied: p.outcome !== 'succeeded' })),
      device_access: se.deviceAccess.map((d) => ({ path: printablePath(d.path), denied: d.result !== 'ok' })),
      // A read is reported only for a path this run does not expose: it found nothing there.
      // `as_written`: how the program spelled it, when its own links (or /proc's) led elsewhere.
      file_access_attempts: se.fileAccess.map((a) => ({ path: printablePath(a.path), access: a.access, denied: a.result !== 'ok', ...(a.asWritten !== undefined ? { as_written: printablePath(a.asWritten) } : {}) })),
      unreadable_syscalls: (se.unreadableSyscalls ?? []).map((u) => ({ name: u.syscall, count: u.count })),
      refused_syscalls: (se.refusedSyscalls ?? []).map((r) => ({ name: r.name, count: r.count })),
      anonymous_executables: se.processesSpawned.executables.filter((e) => e.anonymous).map((e) => printablePath(e.path)),
      network_used: attempts.length > 0 || proxied.length > 0 || (obs.network?.bytesIn ?? 0) + (obs.network?.bytesOut ?? 0) > 0,
      privileged_syscall_attempted: se.privilegedSyscalls.length > 0,
      device_access_attempted: se.deviceAccess.length > 0,
    };
  } else {
    const why = obs.sideEffectsUnavailable ?? 'no syscall trace on this host';
    side_effects = {
      processes_spawned: null, executables: null, signals_sent: null, network_attempts: null, privileged_syscalls: null,
      device_access: null, file_access_attempts: null, network_used: null, privileged_syscall_attempted: null, device_access_attempted: null,
    };
    for (const k of Object.keys(side_effects)) unmeasured[`side_effects.${k}`] = why;
  }

  const changes = [...(obs.fs.out ?? []), ...obs.fs.scopes.flatMap((s) => s.changes ?? [])];
  const diff: SandboxResult['filesystem_diff'] = { added: [], modified: [], deleted: [] };
  for (const c of changes) {
    const list = diff[c.change];
    const e = entry(c, tomb);
    const i = list.push(e) - 1;
    for (const h of ['sha256_before', 'sha256_after'] as const) if (e[h] === null) unmeasured[`filesystem_diff.${c.change}[${i}].${h}`] = 'the file could not be hashed';
  }
  uniquePaths(diff);

  const stream = (s: Observation['stdout']) => {
    const shown = s.bytes.subarray(0, SANDBOX_RESULT_STREAM_BYTES);
    return { text: shown.toString('utf8'), total_bytes: s.totalBytes, captured_bytes: shown.length, truncated: shown.length < s.totalBytes, sha256: s.sha256 };
  };
  return {
    schema_version: '1.0',
    action_id: action.id,
    sandbox_id: args.sandboxId,
    execution: {
      started_at: obs.startedAt,
      ended_at: obs.endedAt,
      wall_time_ms: Math.round(obs.wallMs),
      status: obs.status,
      exit_code: obs.exit.code,
      signal: obs.exit.signal,
      termination_reason: obs.reason.slice(0, 500) || obs.status,
    },
    outputs: { stdout: stream(obs.stdout), stderr: stream(obs.stderr) },
    filesystem_diff: diff,
    resources,
    side_effects,
    unmeasured,
    compliance: { ...judgement.compliance },
    verdict: { recommended_action: judgement.verdict, reasons: judgement.reasons.slice(0, 64).map((r) => r.slice(0, 500)) },
    audit: { log_level: 'DETAILED', retain_days: 30, forensic_ref: null },
  };
}

/**
 * Renders our own Sandbox Result and checks the exact text that will be written against the
 * contract (schema and every rule): the outcome of `sandboxResultContract.parse(text)`, for less.
 * The text is JSON.stringify of a plain object, so the JSON reader's own checks (syntax, duplicate
 * keys, nesting depth, BOM/CRLF) cannot fail on it and JSON.parse gives the same data; the reader's
 * line map is built only when there are problems to report with their lines.
 */
export function renderSandboxResult(result: SandboxResult): { text: string; self: Result<SandboxResult> } {
  const text = sandboxResultContract.render(result);
  if (Buffer.byteLength(text, 'utf8') <= SANDBOX_RESULT_MAX_BYTES) {
    const self = validateSandboxResult(JSON.parse(text));
    if (self.ok) return { text, self };
  }
  return { text, self: sandboxResultContract.parse(text) };
}
