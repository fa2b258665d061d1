import * as z from 'zod';
import { detectJsonKind, validTimestamp, type ActionDescriptor } from './action-descriptor.js';
import { deletionDeclared, globWithin, literalPrefix, pathMatches, pathSegments, type PathCover } from '../base/globs.js';
import { formatPath, parseJsonDocument, schemaProblems, type JsonPath, type SchemaIssue } from './json-doc.js';
import type { Contract, Rule } from './problem.js';
import type { Problem, Result } from '../base/problem.js';

/**
 * Sandbox Result v1 (/work/shared/specs/sandbox-result.schema.md, docs/sandbox-result.md): what
 * actually happened when an Action Descriptor ran in a sandbox. Written by the host only.
 *
 * Unmeasured figures: a measured field that could not be measured is `null`, and the top-level
 * `unmeasured` map gives the reason under the field's path (`"resources.peak_memory_bytes": "..."`).
 * Every null has a reason; no reason names a field that holds a value.
 */

// ---------------------------------------------------------------- types

export const EXECUTION_STATUSES = ['SUCCESS', 'FAILURE', 'TIMEOUT', 'RESOURCE_KILLED', 'POLICY_ABORTED', 'SANDBOX_ERROR'] as const;
export type ExecutionStatus = (typeof EXECUTION_STATUSES)[number];
export const RECOMMENDED_ACTIONS = ['PROMOTE', 'REQUIRE_CONFIRMATION', 'BLOCK', 'FORCE_ROLLBACK'] as const;
export type RecommendedAction = (typeof RECOMMENDED_ACTIONS)[number];
export const FILE_TYPES = ['file', 'dir', 'symlink', 'hardlink', 'fifo', 'socket', 'char_device', 'block_device'] as const;
export type FileType = (typeof FILE_TYPES)[number];
export const COMPLIANCE_FIELDS = [
  'effects_within_declaration',
  'resources_within_limits',
  'within_scope',
  'sandbox_requirements_met',
  'rollback_possible',
  'no_privileged_syscalls',
  'no_device_access',
  'no_undeclared_network',
] as const;
export type ComplianceField = (typeof COMPLIANCE_FIELDS)[number];

export interface OutputStream {
  /** The captured text (a preview when truncated); data, never instructions. */
  text: string;
  total_bytes: number;
  captured_bytes: number;
  truncated: boolean;
  /** sha256 of the whole stream, captured or not. */
  sha256: string;
}

export interface DiffEntry {
  path: string;
  type: FileType;
  /** Octal permission bits, e.g. "0644" (after the change; before it for deleted entries). */
  mode: string;
  size_bytes: number | null;
  /** Content hash before the change (modified, deleted); for symlinks the hash of the target string. */
  sha256_before?: string | null;
  /** Content hash after the change (added, modified). */
  sha256_after?: string | null;
  /** symlink: its target as stored; hardlink: an absolute path in the diff it shares an inode with. */
  link_target?: string;
  /** hardlink: how many names the inode has, when none of the others is in the observed trees. */
  link_count?: number;
  /** Where the host keeps the previous content (required for deleted entries). */
  tombstone?: string;
}

export interface SandboxResult {
  schema_version: '1.0';
  action_id: string;
  sandbox_id: string;
  execution: {
    started_at: string;
    ended_at: string;
    wall_time_ms: number;
    status: ExecutionStatus;
    /** null when the process was killed by a signal or never started. */
    exit_code: number | null;
    signal: string | null;
    termination_reason: string;
  };
  outputs: { stdout: OutputStream; stderr: OutputStream };
  filesystem_diff: { added: DiffEntry[]; modified: DiffEntry[]; deleted: DiffEntry[] };
  resources: {
    cpu_user_ms: number | null;
    cpu_system_ms: number | null;
    peak_memory_bytes: number | null;
    disk_write_bytes: number | null;
    network_bytes_in: number | null;
    network_bytes_out: number | null;
    wall_time_ms: number | null;
  };
  side_effects: {
    processes_spawned: number | null;
    executables: string[] | null;
    signals_sent: { signal: string; count: number }[] | null;
    network_attempts: { address: string; port: number; protocol: 'tcp' | 'udp' | 'icmp' | 'unix' | 'other'; allowed: boolean }[] | null;
    privileged_syscalls: { name: string; count: number; denied: boolean }[] | null;
    device_access: { path: string; denied: boolean }[] | null;
    /** Airlock: writes outside the run's writable areas and reads of host-secret paths it does not expose (absent from results written before it existed). */
    file_access_attempts?: { path: string; access: 'read' | 'write'; denied: boolean; as_written?: string }[] | null;
    /** Airlock: observed calls whose arguments the host could not read (absent from results written before it existed). */
    unreadable_syscalls?: { name: string; count: number }[] | null;
    /** Airlock: calls off the seccomp allowlist, refused (absent from results written before it existed). */
    refused_syscalls?: { name: string; count: number }[] | null;
    /** Airlock: executables that had no name in any filesystem (memfd, deleted), by the kernel's name of them. */
    anonymous_executables?: string[] | null;
    network_used: boolean | null;
    privileged_syscall_attempted: boolean | null;
    device_access_attempted: boolean | null;
  };
  /** Field path -> why that measured field is null. */
  unmeasured: Record<string, string>;
  compliance: Record<ComplianceField, boolean>;
  verdict: { recommended_action: RecommendedAction; reasons: string[] };
  audit: { log_level: 'SUMMARY' | 'DETAILED' | 'FORENSIC'; retain_days: number; forensic_ref: string | null };
}

// ---------------------------------------------------------------- schema (structure only; published as JSON Schema)

export const SCHEMA_VERSION = '1.0';
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$/;
/** A TR run's action is the Tool Request itself: its action_id is the request_id. */
const ACTION_ID = new RegExp(`${UUID.source}|^TR-\\d{8}-\\d{6}Z-[a-z0-9][a-z0-9_-]{0,63}$`);
const ISO_TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;
const sha = z.string().regex(/^[0-9a-f]{64}$/);
const count = z.number().int().nonnegative();
const text = (max: number) => z.string().min(1).max(max);
/** `[{ name, count }]` of syscalls: a name as the host's tables give it, `syscall_<nr>` or `<abi>:<name>`. */
const syscallCounts = z.array(z.strictObject({ name: z.string().regex(/^[a-z0-9_:]{1,64}$/), count: count.min(1) })).max(1000).nullable();
const MAX_ENTRIES = 100_000;

const Stream = z.strictObject({ text: z.string(), total_bytes: count, captured_bytes: count, truncated: z.boolean(), sha256: sha });
const Entry = z.strictObject({
  path: text(4096),
  type: z.enum(FILE_TYPES),
  mode: z.string().regex(/^0?[0-7]{3,4}$/),
  size_bytes: count.nullable(),
  sha256_before: sha.nullable().optional(),
  sha256_after: sha.nullable().optional(),
  link_target: text(4096).optional(),
  link_count: z.number().int().min(2).optional(),
  tombstone: text(512).optional(),
});

const SandboxResultSchema = z.strictObject({
  schema_version: z.literal(SCHEMA_VERSION),
  action_id: z.string().regex(ACTION_ID),
  sandbox_id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/),
  execution: z.strictObject({
    started_at: z.string().regex(ISO_TIMESTAMP),
    ended_at: z.string().regex(ISO_TIMESTAMP),
    wall_time_ms: count,
    status: z.enum(EXECUTION_STATUSES),
    exit_code: z.number().int().min(-2147483648).max(2147483647).nullable(),
    signal: z.string().regex(/^SIG[A-Z0-9+-]{1,16}$/).nullable(),
    termination_reason: text(500),
  }),
  outputs: z.strictObject({ stdout: Stream, stderr: Stream }),
  filesystem_diff: z.strictObject({
    added: z.array(Entry).max(MAX_ENTRIES),
    modified: z.array(Entry).max(MAX_ENTRIES),
    deleted: z.array(Entry).max(MAX_ENTRIES),
  }),
  resources: z.strictObject({
    cpu_user_ms: count.nullable(),
    cpu_system_ms: count.nullable(),
    peak_memory_bytes: count.nullable(),
    disk_write_bytes: count.nullable(),
    network_bytes_in: count.nullable(),
    network_bytes_out: count.nullable(),
    wall_time_ms: count.nullable(),
  }),
  side_effects: z.strictObject({
    processes_spawned: count.nullable(),
    executables: z.array(text(4096)).max(10_000).nullable(),
    signals_sent: z.array(z.strictObject({ signal: z.string().regex(/^SIG[A-Z0-9+-]{1,16}$/), count: count.min(1) })).max(1000).nullable(),
    network_attempts: z
      .array(z.strictObject({ address: text(256), port: z.number().int().min(0).max(65535), protocol: z.enum(['tcp', 'udp', 'icmp', 'unix', 'other']), allowed: z.boolean() }))
      .max(10_000)
      .nullable(),
    privileged_syscalls: z.array(z.strictObject({ name: z.string().regex(/^[a-z0-9_]{1,64}$/), count: count.min(1), denied: z.boolean() })).max(1000).nullable(),
    device_access: z.array(z.strictObject({ path: text(4096), denied: z.boolean() })).max(1000).nullable(),
    file_access_attempts: z.array(z.strictObject({ path: text(4096), access: z.enum(['read', 'write']), denied: z.boolean(), as_written: text(8192).optional() })).max(1000).nullable().optional(),
    unreadable_syscalls: syscallCounts.optional(),
    refused_syscalls: syscallCounts.optional(),
    anonymous_executables: z.array(text(4096)).max(1000).nullable().optional(),
    network_used: z.boolean().nullable(),
    privileged_syscall_attempted: z.boolean().nullable(),
    device_access_attempted: z.boolean().nullable(),
  }),
  unmeasured: z.record(z.string().max(200), text(500)),
  compliance: z.strictObject(Object.fromEntries(COMPLIANCE_FIELDS.map((f) => [f, z.boolean()])) as Record<ComplianceField, z.ZodBoolean>),
  verdict: z.strictObject({ recommended_action: z.enum(RECOMMENDED_ACTIONS), reasons: z.array(text(500)).max(64) }),
  audit: z.strictObject({
    log_level: z.enum(['SUMMARY', 'DETAILED', 'FORENSIC']),
    retain_days: z.number().int().positive(),
    forensic_ref: text(512).nullable(),
  }),
});

// ---------------------------------------------------------------- rules

const r = (code: string, spec: string, fix: string): Rule => ({ code, spec, fix });

export const sandboxResultRules = [
  r('SR_SCHEMA', '§3: all sections are mandatory; every field has its type (the published JSON Schema).', 'Write the missing section or field with its type; see docs/sandbox-result.md.'),
  r('SR_UNKNOWN_FIELD', 'Airlock: a Sandbox Result has exactly the fields of the schema (a field nobody checks is a place to hide things).', 'Remove the field.'),
  r('SR_VERSION', '§4.1: schema_version identifies the format; Airlock reads "1.0".', 'Set "schema_version": "1.0".'),
  r('SR_ACTION_ID', '§4.2: action_id identifies the Action Descriptor (a UUID), or for a Tool Request run the request_id.', 'Copy the descriptor\'s action_id.'),
  r('SR_SANDBOX_ID', '§4.3: sandbox_id identifies one sandbox execution (Airlock: 1-128 of A-Z a-z 0-9 . _ : -).', 'Use the host\'s run id.'),
  r('SR_TIME', '§5: when the sandbox started and ended (ISO-8601; end not before start; resources.wall_time_ms equals execution.wall_time_ms).', 'Record real start and end timestamps with a time zone and one wall time.'),
  r('SR_STATUS_INCONSISTENT', '§5: the status agrees with how the process ended (SUCCESS: exit 0, no signal; FAILURE: non-zero exit or signal; a process that ran has an exit code or a signal).', 'Record the status the exit code and signal show.'),
  r('SR_OUTPUT_INCONSISTENT', '§6: truncation must be explicitly indicated (truncated is true exactly when captured_bytes < total_bytes).', 'Set truncated, captured_bytes and total_bytes from what was captured.'),
  r('SR_PATH_NOT_ABSOLUTE', '§7: all paths must be absolute (Airlock: and normalised).', 'Report absolute, normalised paths (no `.`, `..`, `//`, trailing `/` or control characters).'),
  r('SR_HASH_MISSING', '§7: cryptographic hashes are mandatory for all file changes (added: after; modified: before and after; deleted: before).', 'Hash the content (or the symlink target); if it could not be hashed write null and say why in `unmeasured`.'),
  r('SR_DIFF_ENTRY', '§7: each change is described by what it is (hash fields only for content, link_target only for links, tombstones only for removed content).', 'Give each entry the fields of its type and change kind (docs/sandbox-result.md).'),
  r('SR_TOMBSTONE_MISSING', '§7: deleted files must be tombstoned rather than physically destroyed.', 'Give every deleted entry the tombstone reference the host keeps.'),
  r('SR_DIFF_DUPLICATE', '§7: a path is one change (added, modified or deleted, once).', 'Report each path once, under the one change it underwent.'),
  r('SR_NULL_WITHOUT_REASON', 'Airlock: a figure that could not be measured is null with a reason, never 0 and never silent.', 'Add `"<field path>": "<why>"` to `unmeasured` for each null measured field.'),
  r('SR_REASON_WITHOUT_NULL', 'Airlock: an `unmeasured` reason accompanies a null, never a value.', 'Remove the reason, or report the field as null.'),
  r('SR_COMPLIANCE_MISSING', '§13: compliance fields are missing -> the result is invalid.', 'Write all eight compliance booleans.'),
  r('SR_COMPLIANCE_UNSUPPORTED', '§10: compliance is determined from what was observed; a true value the observation cannot support is invalid.', 'Set the compliance field false when its observation is missing or shows a violation.'),
  r('SR_SIDE_EFFECTS_INCONSISTENT', '§9: side-effect flags agree with the observed lists and byte counts.', 'Derive the flags from the lists.'),
  r('SR_VERDICT_MUST_BLOCK', '§13: sandbox error, undeclared effects or network, exceeded limits, an unverifiable diff -> immediate block.', 'Recommend BLOCK (or FORCE_ROLLBACK) and say why in reasons.'),
  r('SR_VERDICT_NOT_PROMOTE', '§10: any false compliance value forbids promotion (Airlock: so does POLICY_ABORTED).', 'Recommend REQUIRE_CONFIRMATION, BLOCK or FORCE_ROLLBACK.'),
  r('SR_VERDICT_REASONS', '§11: the verdict is structured guidance; Airlock: a verdict other than PROMOTE states its reasons.', 'List at least one factual reason.'),
] as const satisfies readonly Rule[];

/** Codes of validateSandboxResultAgainst (two documents: not reachable from a single file). */
export const sandboxResultCrossRules = [
  r('SR_ACTION_ID_MISMATCH', '§4.2: action_id must exactly match the descriptor\'s; any mismatch invalidates the result.', 'Judge the result against the descriptor it was run for.'),
  r('SR_UNDECLARED_EFFECT', '§7: any undeclared filesystem effect results in a hard block.', 'Block; the descriptor must declare the effect before a new proposal.'),
  r('SR_OUTSIDE_SCOPE', '§7: no filesystem changes are permitted outside the declared scope.', 'Block; the change lies outside every scope path of the descriptor.'),
  r('SR_RESOURCE_OVER_LIMIT', '§8: exceeding declared resource limits results in non-compliance.', 'Block; the run used more than the descriptor\'s caps.'),
  r('SR_UNDECLARED_NETWORK', '§8: any network usage when not explicitly declared results in a hard block.', 'Block; declare effects.network in a new proposal if the network is needed.'),
  r('SR_COMPLIANCE_MISMATCH', '§10: compliance is generated from the comparison; a true value the comparison contradicts is invalid.', 'Regenerate compliance from the comparison with the descriptor.'),
  r('SR_VERDICT_MUST_BLOCK', '§13: invalid results must never be promoted.', 'Recommend BLOCK.'),
] as const satisfies readonly Rule[];

function codeForIssue(issue: SchemaIssue, path: JsonPath): string {
  if (issue.code === 'unrecognized_keys') return 'SR_UNKNOWN_FIELD';
  const [a] = path;
  if (a === 'schema_version') return 'SR_VERSION';
  if (a === 'action_id') return 'SR_ACTION_ID';
  if (a === 'sandbox_id') return 'SR_SANDBOX_ID';
  if (a === 'compliance') return 'SR_COMPLIANCE_MISSING';
  if (a === 'execution' && (path[1] === 'started_at' || path[1] === 'ended_at')) return 'SR_TIME';
  return 'SR_SCHEMA';
}

// ---------------------------------------------------------------- rule checks on a structurally valid result

type Emit = (code: string, message: string, path: JsonPath) => void;
const CONTENT_TYPES = new Set<FileType>(['file', 'hardlink', 'symlink']);
const CHANGE_KINDS = ['added', 'modified', 'deleted'] as const;
type ChangeKind = (typeof CHANGE_KINDS)[number];
/** Which hash keys each change kind carries (content types only). */
const HASHES: Record<ChangeKind, { need: ('sha256_before' | 'sha256_after')[]; forbid: ('sha256_before' | 'sha256_after')[] }> = {
  added: { need: ['sha256_after'], forbid: ['sha256_before'] },
  modified: { need: ['sha256_before', 'sha256_after'], forbid: [] },
  deleted: { need: ['sha256_before'], forbid: ['sha256_after'] },
};
const BLOCKING = new Set<RecommendedAction>(['BLOCK', 'FORCE_ROLLBACK']);

/** Why a real (observed) path is not absolute and normalised, or null. Real names may contain glob characters. */
export function checkObservedPath(path: string): string | null {
  if (!path.startsWith('/')) return 'is not absolute';
  if (path !== '/' && path.endsWith('/')) return 'ends with `/`';
  if (path.includes('//')) return 'has an empty segment (`//`)';
  if (pathSegments(path).some((s) => s === '.' || s === '..')) return 'has a `.` or `..` segment';
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(path)) return 'contains control characters (the host escapes them)';
  return null;
}

/** Every measured field that may be null, with its path (the keys `unmeasured` may use). */
function measuredFields(s: SandboxResult): { path: (string | number)[]; value: unknown }[] {
  const out: { path: (string | number)[]; value: unknown }[] = [];
  for (const [k, v] of Object.entries(s.resources)) out.push({ path: ['resources', k], value: v });
  for (const k of ['processes_spawned', 'executables', 'signals_sent', 'network_attempts', 'privileged_syscalls', 'device_access', 'network_used', 'privileged_syscall_attempted', 'device_access_attempted'] as const)
    out.push({ path: ['side_effects', k], value: s.side_effects[k] });
  for (const k of ['file_access_attempts', 'unreadable_syscalls', 'refused_syscalls', 'anonymous_executables'] as const)
    if (s.side_effects[k] !== undefined) out.push({ path: ['side_effects', k], value: s.side_effects[k] });
  for (const kind of CHANGE_KINDS)
    s.filesystem_diff[kind].forEach((e, i) => {
      out.push({ path: ['filesystem_diff', kind, i, 'size_bytes'], value: e.size_bytes });
      for (const h of ['sha256_before', 'sha256_after'] as const) if (h in e) out.push({ path: ['filesystem_diff', kind, i, h], value: e[h] });
    });
  return out;
}

/** A null hash anywhere in the diff: the diff cannot be verified. */
const unverifiableDiff = (s: SandboxResult): boolean =>
  CHANGE_KINDS.some((k) => s.filesystem_diff[k].some((e) => e.sha256_before === null || e.sha256_after === null));

function checkResult(s: SandboxResult, emit: Emit): void {
  const ex = s.execution;
  // Time.
  for (const k of ['started_at', 'ended_at'] as const) if (!validTimestamp(ex[k])) emit('SR_TIME', `execution.${k} is not a real date and time`, ['execution', k]);
  if (Date.parse(ex.ended_at) < Date.parse(ex.started_at)) emit('SR_TIME', 'execution.ended_at is before execution.started_at', ['execution', 'ended_at']);
  if (s.resources.wall_time_ms !== null && s.resources.wall_time_ms !== ex.wall_time_ms) emit('SR_TIME', 'resources.wall_time_ms differs from execution.wall_time_ms', ['resources', 'wall_time_ms']);

  // Status against exit code and signal.
  if (ex.status === 'SUCCESS' && (ex.exit_code !== 0 || ex.signal !== null)) emit('SR_STATUS_INCONSISTENT', 'status SUCCESS needs exit_code 0 and no signal', ['execution', 'status']);
  if (ex.status === 'FAILURE' && ex.exit_code === 0 && ex.signal === null) emit('SR_STATUS_INCONSISTENT', 'status FAILURE with exit_code 0 and no signal', ['execution', 'status']);
  if (ex.status !== 'SANDBOX_ERROR' && ex.status !== 'POLICY_ABORTED' && ex.exit_code === null && ex.signal === null)
    emit('SR_STATUS_INCONSISTENT', `status ${ex.status} means the process ran: give its exit_code or the signal that ended it`, ['execution', 'exit_code']);

  // Outputs.
  for (const k of ['stdout', 'stderr'] as const) {
    const o = s.outputs[k];
    if (o.captured_bytes > o.total_bytes) emit('SR_OUTPUT_INCONSISTENT', `outputs.${k}.captured_bytes is larger than total_bytes`, ['outputs', k, 'captured_bytes']);
    else if (o.truncated !== o.captured_bytes < o.total_bytes) emit('SR_OUTPUT_INCONSISTENT', `outputs.${k}.truncated must be ${o.captured_bytes < o.total_bytes} for ${o.captured_bytes} of ${o.total_bytes} bytes captured`, ['outputs', k, 'truncated']);
    // Undecodable bytes become U+FFFD (3 bytes in UTF-8): the text can never be longer than that.
    if (Buffer.byteLength(o.text, 'utf8') > 3 * o.captured_bytes) emit('SR_OUTPUT_INCONSISTENT', `outputs.${k}.text is longer than the captured bytes`, ['outputs', k, 'text']);
  }

  // Filesystem diff.
  const seen = new Map<string, string>();
  for (const kind of CHANGE_KINDS) {
    s.filesystem_diff[kind].forEach((e, i) => {
      const at = ['filesystem_diff', kind, i];
      const bad = checkObservedPath(e.path);
      if (bad) emit('SR_PATH_NOT_ABSOLUTE', `filesystem_diff.${kind}[${i}].path ${bad}`, [...at, 'path']);
      const prior = seen.get(e.path);
      if (prior) emit('SR_DIFF_DUPLICATE', `filesystem_diff.${kind}[${i}] repeats the path of ${prior}`, [...at, 'path']);
      else seen.set(e.path, `filesystem_diff.${kind}[${i}]`);
      if (CONTENT_TYPES.has(e.type)) {
        for (const h of HASHES[kind].need) if (!(h in e)) emit('SR_HASH_MISSING', `filesystem_diff.${kind}[${i}] (${e.type}) needs ${h}`, at);
        for (const h of HASHES[kind].forbid) if (h in e) emit('SR_DIFF_ENTRY', `a ${kind} entry has no ${h}`, [...at, h]);
      } else {
        for (const h of ['sha256_before', 'sha256_after'] as const) if (h in e) emit('SR_DIFF_ENTRY', `a ${e.type} has no content to hash: remove ${h}`, [...at, h]);
      }
      const isLink = e.type === 'symlink' || e.type === 'hardlink';
      if (e.type === 'symlink' && e.link_target === undefined) emit('SR_DIFF_ENTRY', 'a symlink entry needs link_target', at);
      if (e.type === 'hardlink' && e.link_target === undefined && e.link_count === undefined) emit('SR_DIFF_ENTRY', 'a hardlink entry needs link_target (another of its paths in the diff) or link_count', at);
      if (e.type !== 'hardlink' && e.link_count !== undefined) emit('SR_DIFF_ENTRY', 'link_count belongs to hardlink entries only', [...at, 'link_count']);
      if (!isLink && e.link_target !== undefined) emit('SR_DIFF_ENTRY', `link_target belongs to symlink and hardlink entries only`, [...at, 'link_target']);
      if (e.type === 'hardlink' && e.link_target !== undefined) {
        const badTarget = checkObservedPath(e.link_target);
        if (badTarget) emit('SR_PATH_NOT_ABSOLUTE', `filesystem_diff.${kind}[${i}].link_target ${badTarget}`, [...at, 'link_target']);
      }
      if (kind === 'deleted' && e.tombstone === undefined) emit('SR_TOMBSTONE_MISSING', `filesystem_diff.deleted[${i}] has no tombstone reference`, at);
      if (kind === 'added' && e.tombstone !== undefined) emit('SR_DIFF_ENTRY', 'an added entry has no previous content to tombstone', [...at, 'tombstone']);
    });
  }
  for (const list of ['device_access', 'file_access_attempts'] as const) {
    (s.side_effects[list] ?? []).forEach((d, i) => {
      const bad = checkObservedPath(d.path);
      if (bad) emit('SR_PATH_NOT_ABSOLUTE', `side_effects.${list}[${i}].path ${bad}`, ['side_effects', list, i, 'path']);
    });
  }

  // Null <-> reason.
  const nullable = new Map(measuredFields(s).map((f) => [formatPath(f.path), f]));
  for (const [key, f] of nullable) if (f.value === null && s.unmeasured[key] === undefined) emit('SR_NULL_WITHOUT_REASON', `${key} is null: say why in unmeasured["${key}"]`, f.path);
  for (const key of Object.keys(s.unmeasured)) {
    const f = nullable.get(key);
    if (!f) emit('SR_REASON_WITHOUT_NULL', `unmeasured names ${JSON.stringify(key.slice(0, 100))}, which is not a measured field of this result`, ['unmeasured', key]);
    else if (f.value !== null) emit('SR_REASON_WITHOUT_NULL', `unmeasured["${key}"] gives a reason but the field has a value`, ['unmeasured', key]);
  }

  // Side-effect flags against their lists.
  const se = s.side_effects;
  const flag = (name: 'network_used' | 'privileged_syscall_attempted' | 'device_access_attempted', list: unknown[] | null, extra = false) => {
    const v = se[name];
    if (list !== null && v !== null && v !== (list.length > 0 || extra)) emit('SR_SIDE_EFFECTS_INCONSISTENT', `side_effects.${name} must be ${list.length > 0 || extra} for what was observed`, ['side_effects', name]);
    if (v === true && list !== null && list.length === 0 && !extra) emit('SR_SIDE_EFFECTS_INCONSISTENT', `side_effects.${name} is true but nothing is listed`, ['side_effects', name]);
  };
  const netBytes = (s.resources.network_bytes_in ?? 0) + (s.resources.network_bytes_out ?? 0) > 0;
  flag('network_used', se.network_attempts, netBytes);
  if (se.network_used === false && netBytes) emit('SR_SIDE_EFFECTS_INCONSISTENT', 'side_effects.network_used is false but network bytes were measured', ['side_effects', 'network_used']);
  flag('privileged_syscall_attempted', se.privileged_syscalls);
  flag('device_access_attempted', se.device_access);

  // Compliance claims the observation must support.
  const c = s.compliance;
  const unsupported = (field: ComplianceField, why: string) => emit('SR_COMPLIANCE_UNSUPPORTED', `compliance.${field} is true but ${why}`, ['compliance', field]);
  if (c.no_privileged_syscalls && (se.privileged_syscalls === null || se.privileged_syscalls.length > 0 || se.privileged_syscall_attempted !== false))
    unsupported('no_privileged_syscalls', se.privileged_syscalls === null || se.privileged_syscall_attempted === null ? 'privileged syscalls were not observed' : 'privileged syscalls were attempted');
  if (c.no_device_access && (se.device_access === null || se.device_access.length > 0 || se.device_access_attempted !== false))
    unsupported('no_device_access', se.device_access === null || se.device_access_attempted === null ? 'device access was not observed' : 'devices were accessed');
  if (c.no_undeclared_network && (se.network_attempts === null || se.network_used === null)) unsupported('no_undeclared_network', 'network use was not observed');
  // A call whose arguments the host could not read is a run it did not fully observe.
  if (c.sandbox_requirements_met && (se.unreadable_syscalls?.length ?? 0) > 0) unsupported('sandbox_requirements_met', 'the host could not read the arguments of some system calls (unreadable_syscalls)');
  const limited = ['cpu_user_ms', 'cpu_system_ms', 'peak_memory_bytes', 'disk_write_bytes', 'wall_time_ms'] as const;
  if (c.resources_within_limits) {
    const missing = limited.filter((k) => s.resources[k] === null);
    if (missing.length) unsupported('resources_within_limits', `${missing.join(', ')} were not measured`);
    else if (ex.status === 'TIMEOUT' || ex.status === 'RESOURCE_KILLED') unsupported('resources_within_limits', `the run ended with ${ex.status}`);
  }
  if (unverifiableDiff(s)) {
    for (const f of ['effects_within_declaration', 'within_scope', 'rollback_possible'] as const) if (c[f]) unsupported(f, 'the filesystem diff has unhashed changes');
  }

  // Verdict.
  const action = s.verdict.recommended_action;
  const mustBlock: string[] = [];
  if (ex.status === 'SANDBOX_ERROR') mustBlock.push('the sandbox failed (SANDBOX_ERROR)');
  for (const f of ['effects_within_declaration', 'within_scope', 'no_undeclared_network', 'resources_within_limits'] as const) if (!c[f]) mustBlock.push(`compliance.${f} is false`);
  if (unverifiableDiff(s)) mustBlock.push('the filesystem diff cannot be verified (a hash is missing)');
  if (mustBlock.length && !BLOCKING.has(action)) emit('SR_VERDICT_MUST_BLOCK', `verdict must be BLOCK: ${mustBlock.join('; ')}`, ['verdict', 'recommended_action']);
  else if (action === 'PROMOTE') {
    const no = COMPLIANCE_FIELDS.filter((f) => !c[f]).map((f) => `compliance.${f} is false`);
    if (ex.status === 'POLICY_ABORTED') no.push('the run was aborted by policy');
    if (no.length) emit('SR_VERDICT_NOT_PROMOTE', `PROMOTE is not allowed: ${no.join('; ')}`, ['verdict', 'recommended_action']);
  }
  if (action !== 'PROMOTE' && s.verdict.reasons.length === 0) emit('SR_VERDICT_REASONS', `a ${action} verdict lists its reasons`, ['verdict', 'reasons']);
}

// ---------------------------------------------------------------- cross-document checks (the judge)

/** Every descriptor in a composite tree (the top-level one first). */
function descriptorsOf(d: ActionDescriptor): ActionDescriptor[] {
  return [d, ...(d.children ?? []).flatMap(descriptorsOf)];
}

const MIB = 1024 * 1024;

/**
 * Compares a (valid) Sandbox Result with the (valid) descriptor it ran for. Problems carry paths
 * into the result, no lines (the caller has the result's own document for those).
 */
/**
 * What a Sandbox Result is cross-checked against: an action's declaration (an Action Descriptor's,
 * or the host's Action's, src/action/declaration.ts). Effects are the union over a composite's steps.
 */
export interface Declaration {
  action_id: string;
  scope: { paths: string[]; recursive: boolean };
  effects: { create: string[]; modify: string[]; delete: string[]; network: boolean };
  caps: { cpu_ms: number; memory_bytes: number; disk_bytes: number; duration_ms: number };
}

export function declarationOfDescriptor(descriptor: ActionDescriptor): Declaration {
  const all = descriptorsOf(descriptor);
  const declared = (kind: 'create' | 'modify' | 'delete') => all.flatMap((d) => d.effects.filesystem[kind]);
  const r = descriptor.resources;
  return {
    action_id: descriptor.action_id,
    scope: { paths: descriptor.scope.filesystem.paths, recursive: descriptor.scope.filesystem.recursive },
    effects: { create: declared('create'), modify: declared('modify'), delete: declared('delete'), network: descriptor.effects.network },
    caps: { cpu_ms: r.max_cpu_ms, memory_bytes: r.max_memory_mb * MIB, disk_bytes: r.max_disk_mb * MIB, duration_ms: r.max_duration_ms },
  };
}

export function validateSandboxResultAgainst(result: SandboxResult, declared: Declaration | ActionDescriptor): Problem[] {
  const decl = 'descriptor_version' in declared ? declarationOfDescriptor(declared) : declared;
  const problems: Problem[] = [];
  const emit = (code: string, message: string, path: JsonPath) => problems.push({ code, message, path: formatPath(path) });
  const claims = (field: ComplianceField, why: string, path: JsonPath) => {
    if (result.compliance[field]) emit('SR_COMPLIANCE_MISMATCH', `compliance.${field} is true but ${why}`, path);
  };

  if (result.action_id !== decl.action_id) emit('SR_ACTION_ID_MISMATCH', 'action_id differs from the descriptor\'s action_id', ['action_id']);

  // Filesystem: every change declared, and inside the declared scope.
  const declaredOf = (kind: 'create' | 'modify' | 'delete') => decl.effects[kind];
  const scope: PathCover[] = decl.scope.paths.map((p) => ({ pattern: p, mode: decl.scope.recursive ? 'subtree' : 'children' }));
  const creates = declaredOf('create');
  // A new directory on the way to a declared create is part of that create (mkdir -p).
  const createAncestors = new Set(
    creates.flatMap((c) => {
      const segs = literalPrefix(pathSegments(c));
      return segs.map((_, i) => '/' + segs.slice(0, i + 1).join('/')).filter((a) => a !== c);
    }),
  );
  const kindMap = { added: 'create', modified: 'modify', deleted: 'delete' } as const;
  const deleted = new Set(result.filesystem_diff.deleted.map((e) => e.path));
  for (const kind of CHANGE_KINDS) {
    result.filesystem_diff[kind].forEach((e, i) => {
      const at = ['filesystem_diff', kind, i, 'path'];
      if (!scope.some((s) => globWithin(s, e.path))) {
        emit('SR_OUTSIDE_SCOPE', `filesystem_diff.${kind}[${i}] lies outside the descriptor's scope`, at);
        claims('within_scope', `filesystem_diff.${kind}[${i}] lies outside the scope`, ['compliance', 'within_scope']);
      }
      const patterns = declaredOf(kindMap[kind]);
      const ok =
        kind === 'deleted' ? deletionDeclared(patterns, e.path, deleted) : patterns.some((p) => pathMatches(p, e.path)) || (kind === 'added' && e.type === 'dir' && createAncestors.has(e.path));
      if (!ok) {
        emit('SR_UNDECLARED_EFFECT', `filesystem_diff.${kind}[${i}] is not a declared ${kindMap[kind]} effect`, at);
        claims('effects_within_declaration', `filesystem_diff.${kind}[${i}] is undeclared`, ['compliance', 'effects_within_declaration']);
      }
    });
  }

  // Resources against the caps.
  const res = result.resources;
  const caps = decl.caps;
  const over: [string, number | null, number][] = [
    ['cpu time (user + system ms)', res.cpu_user_ms === null || res.cpu_system_ms === null ? null : res.cpu_user_ms + res.cpu_system_ms, caps.cpu_ms],
    ['peak memory (bytes)', res.peak_memory_bytes, caps.memory_bytes],
    ['disk writes (bytes)', res.disk_write_bytes, caps.disk_bytes],
    ['wall time (ms)', result.execution.wall_time_ms, caps.duration_ms],
  ];
  for (const [what, used, cap] of over) {
    if (used !== null && used > cap) {
      emit('SR_RESOURCE_OVER_LIMIT', `${what}: used ${used}, the descriptor's cap is ${cap}`, ['resources']);
      claims('resources_within_limits', `${what} is over the cap`, ['compliance', 'resources_within_limits']);
    }
  }

  // Network.
  const se = result.side_effects;
  const usedNetwork = (se.network_attempts?.length ?? 0) > 0 || se.network_used === true || (res.network_bytes_in ?? 0) + (res.network_bytes_out ?? 0) > 0;
  if (!decl.effects.network && usedNetwork) {
    emit('SR_UNDECLARED_NETWORK', 'the run used the network but the descriptor declares no network effect', ['side_effects', 'network_attempts']);
    claims('no_undeclared_network', 'the network was used without a declaration', ['compliance', 'no_undeclared_network']);
  }

  // Any of the above is a section-13 hard failure: the verdict must block.
  if (problems.length > 0 && !BLOCKING.has(result.verdict.recommended_action))
    emit('SR_VERDICT_MUST_BLOCK', `verdict ${result.verdict.recommended_action} despite: ${[...new Set(problems.map((p) => p.code))].join(', ')}`, ['verdict', 'recommended_action']);
  return problems;
}

// ---------------------------------------------------------------- parse / validate / render

export function validateSandboxResult(data: unknown, lineOf: (path: JsonPath) => number = () => 1): Result<SandboxResult> {
  if (data === null || typeof data !== 'object' || Array.isArray(data)) {
    return { ok: false, problems: [{ code: 'SR_SCHEMA', message: 'a Sandbox Result is a JSON object', line: 1 }] };
  }
  const parsed = SandboxResultSchema.safeParse(data);
  if (!parsed.success) return { ok: false, problems: schemaProblems(parsed.error.issues as SchemaIssue[], lineOf, codeForIssue) };
  const value = parsed.data as SandboxResult;
  const problems: Problem[] = [];
  checkResult(value, (code, message, path) => problems.push({ code, message, line: lineOf(path), path: formatPath(path) }));
  return problems.length ? { ok: false, problems } : { ok: true, value };
}

/**
 * A Sandbox Result is written by the host, and its diff lists every changed file (up to 100,000):
 * it may be larger than the 1 MiB other documents are held to, but not without bound.
 */
export const SANDBOX_RESULT_MAX_BYTES = 64 * 1024 * 1024;

export const sandboxResultContract: Contract<SandboxResult> = {
  kind: 'sandbox-result',
  detect: (fileName, text) => detectJsonKind(fileName, text) === 'sandbox-result',
  parse(text) {
    const doc = parseJsonDocument(text, { maxBytes: SANDBOX_RESULT_MAX_BYTES });
    if (!doc.ok) return doc;
    return validateSandboxResult(doc.value.data, doc.value.lineOf);
  },
  render: (value) => `${JSON.stringify(value, null, 2)}\n`,
  rules: sandboxResultRules,
  schemas: { 'sandbox-result': SandboxResultSchema },
};
