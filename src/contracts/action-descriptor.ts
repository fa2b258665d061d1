import { detectKind } from './detect.js';
import * as z from 'zod';
import { formatPath, parseJsonDocument, schemaProblems, type JsonPath, type SchemaIssue } from './json-doc.js';
import type { Contract, Rule } from './problem.js';
import type { Problem, Result } from '../base/problem.js';
import { checkAbsolutePath, globWithin, hasWildcard, literalPrefix, pathSegments, type PathCover } from '../base/globs.js';
import { CREDENTIAL_SEGMENTS, isPersistencePath } from '../base/sensitive-paths.js';

/**
 * Action Descriptor v1 (/work/shared/specs/action-descriptor.md, docs/action-descriptor.md): the
 * declaration of one proposed action, made before anything runs. Structure is a strict zod schema
 * (unknown fields are errors: "if an action cannot be fully described, it cannot be executed");
 * every hard fail of the spec is then its own rule code, checked on the typed value.
 */

// ---------------------------------------------------------------- types

export const ACTION_TYPES = [
  'FILE_READ',
  'FILE_WRITE',
  'FILE_DELETE',
  'FILE_MOVE',
  'DIRECTORY_CREATE',
  'DIRECTORY_DELETE',
  'COMMAND_EXECUTION',
  'PACKAGE_INSTALL',
  'PACKAGE_REMOVE',
  'NETWORK_REQUEST',
  'UI_AUTOMATION',
  'CONFIG_CHANGE',
  'MULTI_STEP_COMPOSITE',
] as const;
export type ActionType = (typeof ACTION_TYPES)[number];
export const RISK_LEVELS = ['LOW', 'MEDIUM', 'HIGH', 'CRITICAL'] as const;
export type RiskLevel = (typeof RISK_LEVELS)[number];
export const LOG_LEVELS = ['SUMMARY', 'DETAILED', 'FORENSIC'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface ActionDescriptor {
  descriptor_version: '1.0';
  action_id: string;
  created_at: string;
  created_by: 'ai';
  intent_summary: string;
  action_type: ActionType;
  risk_level: RiskLevel;
  scope: {
    filesystem: { paths: string[]; recursive: boolean };
    network: { required: boolean };
    ui: { required: boolean };
  };
  resources: { max_cpu_ms: number; max_memory_mb: number; max_disk_mb: number; max_duration_ms: number };
  preconditions: { paths_exist?: string[]; network_available?: boolean; user_idle?: boolean };
  effects: {
    filesystem: { create: string[]; modify: string[]; delete: string[] };
    network: boolean;
    system_state_change: boolean;
  };
  sandbox: { required: boolean; sandbox_type: string; allow_network: boolean; max_runs: 1 };
  rollback: { supported: true; rollback_type: string; rollback_scope: string };
  confirmation: { required: boolean; reason: string; cooldown_on_repeat: boolean };
  audit: { log: true; log_level: LogLevel; retain_days: number };
  /** COMMAND_EXECUTION only: the argv to run (no shell is implied). */
  command?: string[];
  /** FILE_WRITE only: the one file written and its content (inline or an input referenced by hash). */
  write?: { path: string; content_base64?: string; source_sha256?: string };
  /** FILE_MOVE only. */
  move?: { from: string; to: string };
  /** MULTI_STEP_COMPOSITE only: the steps, each a full descriptor judged on its own. */
  children?: ActionDescriptor[];
}

// ---------------------------------------------------------------- limits and lists (documented in docs/action-descriptor.md)

export const DESCRIPTOR_VERSION = '1.0';
export const MAX_INTENT_CHARS = 1000;
export const MAX_COMPOSITE_DEPTH = 3;
export const MAX_CHILDREN = 32;
export const MAX_ARGV = 256;
export const MAX_ARG_CHARS = 8192;
const MAX_LIST = 64;

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$/;
const ISO_TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;
const SHA256 = /^[0-9a-f]{64}$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
/** argv[0] is an absolute path or a bare program name resolved on the sandbox's own PATH. */
const BARE_PROGRAM = /^[A-Za-z0-9_][A-Za-z0-9._+-]*$/;

/**
 * Host areas no descriptor may scope or touch ("asks for host access"): the root itself, system
 * configuration and binaries, kernel interfaces, device nodes, boot, service state and scheduling.
 */
export const HOST_PATHS = [
  '/proc', '/sys', '/dev', '/etc', '/root', '/boot', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32',
  '/usr', '/opt', '/snap', '/run', '/var/run', '/var/lib', '/var/spool', '/var/log', '/var/cache', '/lost+found',
] as const;
/** Path segments that hold credentials; any path through them is host access. */
/** Effects on these (shell start-up files, autostart and service folders) are persistence. */

/** Programs that detach from the sandbox run (it must end when the sandbox ends). */
export const BACKGROUND_PROGRAMS = ['nohup', 'setsid', 'disown', 'daemon', 'daemonize', 'start-stop-daemon', 'screen', 'tmux', 'byobu', 'dtach', 'abduco', 'bg'] as const;
/** Programs that schedule or install something that outlives the action. */
export const PERSISTENCE_PROGRAMS = ['crontab', 'at', 'batch', 'systemctl', 'systemd-run', 'service', 'update-rc.d', 'chkconfig', 'rc-update', 'launchctl', 'loginctl', 'insmod', 'modprobe', 'schtasks'] as const;
/** Programs that run their remaining arguments as another command. */
const WRAPPERS = new Set(['env', 'nice', 'ionice', 'chrt', 'taskset', 'stdbuf', 'timeout', 'time', 'xargs', 'exec', 'command', 'builtin', 'sudo', 'doas', 'su', 'runuser', 'chroot', 'unshare', 'nsenter', 'flock', 'watch']);
const SHELLS = new Set(['sh', 'bash', 'dash', 'zsh', 'ksh', 'mksh', 'ash', 'fish', 'csh', 'tcsh', 'busybox']);

// ---------------------------------------------------------------- schema (structure only; published as JSON Schema)

const absString = z.string().min(1).max(4096);
const pathList = z.array(absString).max(MAX_LIST);

const ActionDescriptorSchema = z.strictObject({
  descriptor_version: z.literal(DESCRIPTOR_VERSION),
  action_id: z.string().regex(UUID),
  created_at: z.string().regex(ISO_TIMESTAMP),
  created_by: z.literal('ai'),
  intent_summary: z.string().min(1).max(MAX_INTENT_CHARS),
  action_type: z.enum(ACTION_TYPES),
  risk_level: z.enum(RISK_LEVELS),
  scope: z.strictObject({
    filesystem: z.strictObject({ paths: pathList.min(1), recursive: z.boolean() }),
    network: z.strictObject({ required: z.boolean() }),
    ui: z.strictObject({ required: z.boolean() }),
  }),
  resources: z.strictObject({
    max_cpu_ms: z.number().positive(),
    max_memory_mb: z.number().positive(),
    max_disk_mb: z.number().positive(),
    max_duration_ms: z.number().positive(),
  }),
  preconditions: z.strictObject({
    paths_exist: pathList.optional(),
    network_available: z.boolean().optional(),
    user_idle: z.boolean().optional(),
  }),
  effects: z.strictObject({
    filesystem: z.strictObject({ create: pathList, modify: pathList, delete: pathList }),
    network: z.boolean(),
    system_state_change: z.boolean(),
  }),
  sandbox: z.strictObject({
    required: z.boolean(),
    sandbox_type: z.string().min(1).max(64),
    allow_network: z.boolean(),
    max_runs: z.literal(1),
  }),
  rollback: z.strictObject({
    supported: z.literal(true),
    rollback_type: z.string().min(1).max(64),
    rollback_scope: z.string().min(1).max(64),
  }),
  confirmation: z.strictObject({
    required: z.boolean(),
    reason: z.string().max(MAX_INTENT_CHARS),
    cooldown_on_repeat: z.boolean(),
  }),
  audit: z.strictObject({
    log: z.literal(true),
    log_level: z.enum(LOG_LEVELS),
    retain_days: z.number().int().positive(),
  }),
  command: z.array(z.string().max(MAX_ARG_CHARS)).min(1).max(MAX_ARGV).optional(),
  write: z
    .strictObject({
      path: absString,
      content_base64: z.string().regex(BASE64).optional(),
      source_sha256: z.string().regex(SHA256).optional(),
    })
    .optional(),
  move: z.strictObject({ from: absString, to: absString }).optional(),
  get children() {
    return z.array(ActionDescriptorSchema).min(1).max(MAX_CHILDREN).optional();
  },
});

// ---------------------------------------------------------------- rules

export const actionDescriptorRules = [
  r('AD_SCHEMA', 'Fields: every field of the table is present with its type (the published JSON Schema).', 'Add the missing field or fix its type; see docs/action-descriptor.md for the field table.'),
  r('AD_UNKNOWN_FIELD', 'Final rule: if an action cannot be fully described, it cannot be executed (Airlock: fields outside the schema are errors, never ignored).', 'Remove the field; the schema is extended by a new version, never bypassed.'),
  r('AD_VERSION', '`descriptor_version` identifies the schema; Airlock reads version "1.0".', 'Set "descriptor_version": "1.0".'),
  r('AD_ACTION_ID', '`action_id` is a UUID, the key for logs, rollback and audit (Airlock: unique within a composite).', 'Use a fresh RFC 4122 UUID (e.g. from crypto.randomUUID()) for each descriptor and each child.'),
  r('AD_CREATED_AT', '`created_at` is an ISO-8601 timestamp.', 'Write a full timestamp with a time zone, e.g. "2025-01-31T12:00:00Z".'),
  r('AD_CREATED_BY', '`created_by` is "ai".', 'Set "created_by": "ai".'),
  r('AD_INTENT_SUMMARY', `\`intent_summary\` is one paragraph at most (Airlock: 1..${MAX_INTENT_CHARS} characters, no blank line, no control characters).`, 'Describe the action factually in one short paragraph.'),
  r('AD_ACTION_TYPE', '`action_type`: an action that fits none of the types is rejected.', 'Use one of the listed action types; split an action that fits none into ones that do.'),
  r('AD_SCOPE_IMPLICIT', 'Hard fail: uses implicit scope; `scope.filesystem.paths` are absolute paths.', 'List absolute, normalised paths (no relative path, `.`, `..`, `~`, empty or doubled `/`).'),
  r('AD_SCOPE_WILDCARD', '`scope.filesystem.paths`: no wildcards unless `scope.filesystem.recursive` is true.', 'Set "recursive": true or list the paths without `*`, `?` or `[...]`.'),
  r('AD_PATH_INVALID', 'Effects and carrier paths are absolute paths (globs allowed in effects only).', 'Write absolute, normalised paths; use `*`, `?`, `[...]` or a whole `**` segment only in effects; braces are not supported.'),
  r('AD_HOST_ACCESS', `Hard fail: asks for host access (Airlock: \`/\`, a top-level directory as a whole, ${HOST_PATHS.join(', ')}, credential folders, privilege tools).`, 'Scope the action to a project directory at least two levels deep, outside system and credential folders.'),
  r('AD_RESOURCES_UNBOUNDED', 'Hard fail: asks for unlimited resources; all four caps are numbers ("unlimited" is invalid).', 'Give max_cpu_ms, max_memory_mb, max_disk_mb and max_duration_ms as positive finite numbers.'),
  r('AD_ROLLBACK_DISABLED', 'Hard fail: disables rollback; `supported: false` is auto-blocked and the rollback scope must be explicit.', 'Set rollback.supported to true with an explicit rollback_type and rollback_scope.'),
  r('AD_EFFECTS_MISSING', 'Hard fail: omits declared effects.', 'Declare the effects the action type implies (e.g. the delete globs of a FILE_DELETE, effects.network for a NETWORK_REQUEST).'),
  r('AD_EFFECT_OUTSIDE_SCOPE', 'Effects lie inside the declared scope; scope can never grow after creation.', 'Move the effect inside a scope path, or widen scope.filesystem.paths before submitting.'),
  r('AD_SANDBOX_REQUIRED', 'Sandbox mandatory for HIGH/CRITICAL risk, shell commands and filesystem deletes.', 'Set sandbox.required to true.'),
  r('AD_SANDBOX_MAX_RUNS', '`sandbox.max_runs` is 1: an action runs at most once.', 'Set sandbox.max_runs to 1.'),
  r('AD_NETWORK_INCONSISTENT', 'Network use is declared: effects.network needs scope.network.required and sandbox.allow_network, and neither is asked for without it.', 'Make effects.network, scope.network.required and sandbox.allow_network agree.'),
  r('AD_BACKGROUND_EXECUTION', `Hard fail: attempts background execution (Airlock: \`&\`, ${BACKGROUND_PROGRAMS.join(', ')}).`, 'Run the command in the foreground; it must finish within max_duration_ms.'),
  r('AD_PERSISTENCE', `Hard fail: attempts persistence (Airlock: ${PERSISTENCE_PROGRAMS.join(', ')}; effects on shell start-up files, autostart or service folders).`, 'Remove the scheduling or start-up change; Airlock actions do not outlive their run.'),
  r('AD_FORENSIC_LOG_LEVEL', '`audit.log_level` FORENSIC is host-only.', 'Ask for SUMMARY or DETAILED; the host decides on forensic logging.'),
  r('AD_AUDIT_DISABLED', 'Every action is logged immutably; the proposer cannot turn the log off.', 'Set audit.log to true.'),
  r('AD_CARRIER_MISSING', 'A COMMAND_EXECUTION needs `command`; FILE_WRITE `write`; FILE_MOVE `move`; MULTI_STEP_COMPOSITE `children`.', 'Add the field the action type needs (see docs/action-descriptor.md).'),
  r('AD_FIELD_NOT_ALLOWED', 'Type-specific fields appear only on their type (command, write, move, children).', 'Remove the field or change action_type.'),
  r('AD_COMMAND_INVALID', '`command` is a non-empty argv: argv[0] an absolute path or a bare program name, no empty or NUL-containing argument.', 'Write the command as an argv array, e.g. ["/usr/bin/find", "/p/logs", "-name", "*.log"].'),
  r('AD_CARRIER_INVALID', 'The carrier agrees with the effects: write.path is a declared create/modify effect, move.from a delete and move.to a create; write has exactly one content source.', 'Declare the written/moved paths in effects and give exactly one of content_base64 or source_sha256.'),
  r('AD_CHILD_EXCEEDS_PARENT', 'Composite: each child is judged on its own, within the parent\'s scope, effects, resources and network declaration.', 'Keep every child inside the composite\'s scope, effects and limits.'),
  r('AD_COMPOSITE_LIMIT', `Composite: at most ${MAX_CHILDREN} children per step and ${MAX_COMPOSITE_DEPTH} levels of composites.`, 'Flatten or split the composite.'),
] as const satisfies readonly Rule[];

function r(code: string, spec: string, fix: string): Rule {
  return { code, spec, fix };
}

/** Schema issue -> code, by the field it is about (children's fields map like the top level's). */
function codeForIssue(issue: SchemaIssue, path: JsonPath): string {
  if (issue.code === 'unrecognized_keys') return 'AD_UNKNOWN_FIELD';
  let p = [...path];
  while (p[0] === 'children' && typeof p[1] === 'number') p = p.slice(2);
  const [a, b, c] = p;
  if (a === 'descriptor_version') return 'AD_VERSION';
  if (a === 'action_id') return 'AD_ACTION_ID';
  if (a === 'created_at') return 'AD_CREATED_AT';
  if (a === 'created_by') return 'AD_CREATED_BY';
  if (a === 'intent_summary') return 'AD_INTENT_SUMMARY';
  if (a === 'action_type') return 'AD_ACTION_TYPE';
  if (a === 'resources') return 'AD_RESOURCES_UNBOUNDED';
  if (a === 'rollback') return 'AD_ROLLBACK_DISABLED';
  if (a === 'scope' && (b === undefined || (b === 'filesystem' && (c === undefined || c === 'paths')))) return 'AD_SCOPE_IMPLICIT';
  if (a === 'effects' && (b === undefined || (b === 'filesystem' && c === undefined))) return 'AD_EFFECTS_MISSING';
  if (a === 'sandbox' && b === 'max_runs') return 'AD_SANDBOX_MAX_RUNS';
  if (a === 'audit' && b === 'log') return 'AD_AUDIT_DISABLED';
  if (a === 'command') return 'AD_COMMAND_INVALID';
  if (a === 'children' && p.length <= 1 && issue.code === 'too_big') return 'AD_COMPOSITE_LIMIT';
  return 'AD_SCHEMA';
}

// ---------------------------------------------------------------- paths and globs (also used by the Sandbox Result checks and the judge)

// ---------------------------------------------------------------- semantic checks on a structurally valid descriptor

type Emit = (code: string, message: string, path: JsonPath) => void;

const REQUIRES_SANDBOX_TYPES = new Set<ActionType>(['FILE_DELETE', 'DIRECTORY_DELETE', 'COMMAND_EXECUTION']);

function basename(p: string): string {
  return p.slice(p.lastIndexOf('/') + 1);
}

/** Where a path falls into host territory, or null. */
export function hostAccess(path: string): string | null {
  const segs = pathSegments(path);
  const literal = literalPrefix(segs);
  if (literal.length === 0) return 'it covers the whole filesystem root';
  const prefix = '/' + literal.join('/');
  for (const h of HOST_PATHS) if (prefix === h || prefix.startsWith(h + '/')) return `it is inside ${h}`;
  for (const s of segs) if ((CREDENTIAL_SEGMENTS as readonly string[]).includes(s)) return `it goes through the credential folder ${s}`;
  return null;
}

/** Every program name in a command position of the argv (wrappers unwrapped, `sh -c` scripts split). */
function commandPrograms(argv: readonly string[]): { programs: string[]; background: boolean } {
  const programs: string[] = [];
  let background = argv.includes('&');
  let i = 0;
  while (i < argv.length) {
    const name = basename(argv[i] as string);
    programs.push(name);
    if (SHELLS.has(name)) {
      // Scripts given to a shell are split on separators; every segment's first word is a program.
      const c = argv.indexOf('-c', i + 1);
      const script = c >= 0 ? argv[c + 1] : undefined;
      if (script !== undefined) {
        // A lone `&` (not `&&`, `|&` or a redirection like `2>&1` / `&>`) sends a job to the background.
        if (script.replace(/&&|\|&|[0-9]*[<>]&[0-9-]*|&>>?/g, '').includes('&')) background = true;
        for (const seg of script.split(/[;&|()\n`]|\$\(/)) {
          const words = seg.trim().split(/\s+/).filter((w) => w && !/^\w+=/.test(w));
          for (let k = 0; k < words.length; k++) {
            const w = basename(words[k] as string);
            programs.push(w);
            if (!WRAPPERS.has(w)) break;
          }
        }
      }
      break;
    }
    if (!WRAPPERS.has(name)) break;
    // Skip the wrapper's options, variable assignments and (for timeout) the duration.
    i++;
    while (i < argv.length && (/^-/.test(argv[i] as string) || /^\w+=/.test(argv[i] as string) || (name === 'timeout' && /^\d/.test(argv[i] as string)))) i++;
  }
  return { programs, background };
}

function checkDescriptor(d: ActionDescriptor, at: JsonPath, depth: number, emit: Emit, seenIds: Map<string, string>): void {
  const p = (...rest: (string | number)[]) => [...at, ...rest];

  // Identity and prose.
  const prior = seenIds.get(d.action_id.toLowerCase());
  if (prior !== undefined) emit('AD_ACTION_ID', `action_id repeats the one of \`${prior || 'the top-level descriptor'}\`: every step needs its own UUID`, p('action_id'));
  else seenIds.set(d.action_id.toLowerCase(), formatPath(at));
  if (!validTimestamp(d.created_at)) emit('AD_CREATED_AT', 'created_at is not a real date and time', p('created_at'));
  if (d.intent_summary.trim() === '') emit('AD_INTENT_SUMMARY', 'intent_summary is blank', p('intent_summary'));
  if (/\n[ \t]*\n/.test(d.intent_summary)) emit('AD_INTENT_SUMMARY', 'intent_summary has more than one paragraph (a blank line)', p('intent_summary'));
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0009\u000b-\u001f\u007f\u202a-\u202e\u2066-\u2069]/.test(d.intent_summary)) emit('AD_INTENT_SUMMARY', 'intent_summary contains control or bidirectional-override characters', p('intent_summary'));

  // Scope.
  const scope = d.scope.filesystem;
  const scopeCovers: PathCover[] = [];
  scope.paths.forEach((path, i) => {
    const where = p('scope', 'filesystem', 'paths', i);
    const bad = checkAbsolutePath(path);
    if (bad) return emit('AD_SCOPE_IMPLICIT', `scope path ${i} ${bad}`, where);
    if (hasWildcard(path) && !scope.recursive) return emit('AD_SCOPE_WILDCARD', `scope path ${i} has a wildcard but scope.filesystem.recursive is false`, where);
    const host = hostAccess(path);
    if (host) return emit('AD_HOST_ACCESS', `scope path ${i} asks for host access: ${host}`, where);
    if (literalPrefix(pathSegments(path)).length < 2) return emit('AD_HOST_ACCESS', `scope path ${i} covers a top-level directory as a whole; scope a folder at least two levels deep`, where);
    scopeCovers.push({ pattern: path, mode: scope.recursive ? 'subtree' : 'children' });
  });

  // Resources: finite positive caps (the schema already refuses non-numbers, 0 and negatives).
  for (const [k, v] of Object.entries(d.resources)) if (!Number.isFinite(v) || v <= 0) emit('AD_RESOURCES_UNBOUNDED', `resources.${k} must be a positive finite number`, p('resources', k));

  // Effects.
  const fx = d.effects.filesystem;
  for (const kind of ['create', 'modify', 'delete'] as const) {
    fx[kind].forEach((path, i) => {
      const where = p('effects', 'filesystem', kind, i);
      const bad = checkAbsolutePath(path);
      if (bad) return emit('AD_PATH_INVALID', `effects.filesystem.${kind}[${i}] ${bad}`, where);
      const host = hostAccess(path);
      if (host) return emit('AD_HOST_ACCESS', `effects.filesystem.${kind}[${i}] touches the host: ${host}`, where);
      if (kind !== 'delete' && isPersistencePath(path)) emit('AD_PERSISTENCE', `effects.filesystem.${kind}[${i}] changes a start-up or autostart location`, where);
      if (!scopeCovers.some((s) => globWithin(s, path))) emit('AD_EFFECT_OUTSIDE_SCOPE', `effects.filesystem.${kind}[${i}] lies outside every scope.filesystem.paths entry`, where);
    });
  }
  (d.preconditions.paths_exist ?? []).forEach((path, i) => {
    const bad = checkAbsolutePath(path);
    if (bad) emit('AD_PATH_INVALID', `preconditions.paths_exist[${i}] ${bad}`, p('preconditions', 'paths_exist', i));
    else if (hostAccess(path)) emit('AD_HOST_ACCESS', `preconditions.paths_exist[${i}] probes a host path`, p('preconditions', 'paths_exist', i));
  });

  // Effects each type implies.
  const t = d.action_type;
  if ((t === 'FILE_DELETE' || t === 'DIRECTORY_DELETE') && fx.delete.length === 0) emit('AD_EFFECTS_MISSING', `${t} must list what it deletes in effects.filesystem.delete`, p('effects', 'filesystem', 'delete'));
  if (t === 'DIRECTORY_CREATE' && fx.create.length === 0) emit('AD_EFFECTS_MISSING', 'DIRECTORY_CREATE must list the directories in effects.filesystem.create', p('effects', 'filesystem', 'create'));
  if (t === 'FILE_WRITE' && fx.create.length + fx.modify.length === 0) emit('AD_EFFECTS_MISSING', 'FILE_WRITE must list the written file in effects.filesystem.create or modify', p('effects', 'filesystem'));
  if (t === 'NETWORK_REQUEST' && !d.effects.network) emit('AD_EFFECTS_MISSING', 'NETWORK_REQUEST must declare effects.network: true', p('effects', 'network'));
  if (t === 'FILE_READ' && fx.create.length + fx.modify.length + fx.delete.length > 0) emit('AD_EFFECTS_MISSING', 'FILE_READ changes nothing: its effects.filesystem lists must be empty', p('effects', 'filesystem'));

  // Network consistency.
  const net = d.effects.network;
  if (net && !d.scope.network.required) emit('AD_NETWORK_INCONSISTENT', 'effects.network is true but scope.network.required is false', p('scope', 'network', 'required'));
  if (net && d.sandbox.required && !d.sandbox.allow_network) emit('AD_NETWORK_INCONSISTENT', 'effects.network is true but sandbox.allow_network is false: the sandboxed run could not do what is declared', p('sandbox', 'allow_network'));
  if (!net && d.scope.network.required) emit('AD_NETWORK_INCONSISTENT', 'scope.network.required is true but effects.network is false', p('effects', 'network'));
  if (!net && d.sandbox.allow_network) emit('AD_NETWORK_INCONSISTENT', 'sandbox.allow_network is true but no network effect is declared', p('sandbox', 'allow_network'));

  // Sandbox.
  const needsSandbox =
    d.risk_level === 'HIGH' || d.risk_level === 'CRITICAL' || REQUIRES_SANDBOX_TYPES.has(t) || fx.delete.length > 0 ||
    (d.children ?? []).some((c) => c.sandbox.required);
  if (needsSandbox && !d.sandbox.required) {
    const why = d.risk_level === 'HIGH' || d.risk_level === 'CRITICAL' ? `risk_level ${d.risk_level}` : REQUIRES_SANDBOX_TYPES.has(t) ? t : fx.delete.length > 0 ? 'filesystem deletes' : 'a child that needs the sandbox';
    emit('AD_SANDBOX_REQUIRED', `sandbox.required must be true for ${why}`, p('sandbox', 'required'));
  }

  // Audit and rollback (the schema pins supported/log to true; what is left is the level).
  if (d.audit.log_level === 'FORENSIC') emit('AD_FORENSIC_LOG_LEVEL', 'audit.log_level FORENSIC is host-only; ask for SUMMARY or DETAILED', p('audit', 'log_level'));
  if (d.rollback.rollback_scope.trim() === '' || d.rollback.rollback_scope === 'none') emit('AD_ROLLBACK_DISABLED', 'rollback.rollback_scope must be explicit', p('rollback', 'rollback_scope'));

  // Type-specific carriers.
  const carriers = { command: 'COMMAND_EXECUTION', write: 'FILE_WRITE', move: 'FILE_MOVE', children: 'MULTI_STEP_COMPOSITE' } as const;
  for (const [field, type] of Object.entries(carriers) as [keyof typeof carriers, ActionType][]) {
    if (t === type && d[field] === undefined) emit('AD_CARRIER_MISSING', `${type} needs the field \`${field}\``, at.length ? p() : [field]);
    if (t !== type && d[field] !== undefined) emit('AD_FIELD_NOT_ALLOWED', `\`${field}\` belongs to ${type} only, not ${t}`, p(field));
  }
  if (d.command) checkCommand(d.command, p('command'), emit);
  if (d.write && t === 'FILE_WRITE') {
    const w = d.write;
    const bad = checkAbsolutePath(w.path, { wildcards: false });
    if (bad) emit('AD_PATH_INVALID', `write.path ${bad}`, p('write', 'path'));
    else if (![...fx.create, ...fx.modify].some((e) => globWithin({ pattern: e, mode: 'exact' }, w.path))) emit('AD_CARRIER_INVALID', 'write.path is not a declared create or modify effect', p('write', 'path'));
    if ((w.content_base64 === undefined) === (w.source_sha256 === undefined)) emit('AD_CARRIER_INVALID', 'write needs exactly one of content_base64 or source_sha256', p('write'));
  }
  if (d.move && t === 'FILE_MOVE') {
    const { from, to } = d.move;
    for (const [k, v] of [['from', from], ['to', to]] as const) {
      const bad = checkAbsolutePath(v, { wildcards: false });
      if (bad) emit('AD_PATH_INVALID', `move.${k} ${bad}`, p('move', k));
    }
    if (!fx.delete.some((e) => globWithin({ pattern: e, mode: 'exact' }, from))) emit('AD_CARRIER_INVALID', 'move.from is not a declared delete effect', p('move', 'from'));
    if (!fx.create.some((e) => globWithin({ pattern: e, mode: 'exact' }, to))) emit('AD_CARRIER_INVALID', 'move.to is not a declared create effect', p('move', 'to'));
  }

  // Composite children: each judged on its own, inside the parent.
  if (d.children && t === 'MULTI_STEP_COMPOSITE') {
    if (depth > MAX_COMPOSITE_DEPTH) {
      emit('AD_COMPOSITE_LIMIT', `composites nest at most ${MAX_COMPOSITE_DEPTH} levels`, p('children'));
      return;
    }
    const parentEffects = (kind: 'create' | 'modify' | 'delete') => fx[kind].map((e): PathCover => ({ pattern: e, mode: 'exact' }));
    d.children.forEach((child, i) => {
      const cp = [...at, 'children', i];
      checkDescriptor(child, cp, depth + 1, emit, seenIds);
      child.scope.filesystem.paths.forEach((path, k) => {
        if (!scopeCovers.some((s) => globWithin(s, path, child.scope.filesystem.recursive ? 'subtree' : 'children')))
          emit('AD_CHILD_EXCEEDS_PARENT', `children[${i}] scope path ${k} lies outside the composite's scope`, [...cp, 'scope', 'filesystem', 'paths', k]);
      });
      for (const kind of ['create', 'modify', 'delete'] as const) {
        child.effects.filesystem[kind].forEach((path, k) => {
          if (!parentEffects(kind).some((s) => globWithin(s, path)))
            emit('AD_CHILD_EXCEEDS_PARENT', `children[${i}] effect ${kind}[${k}] is not among the composite's declared ${kind} effects (rollback covers the whole composite)`, [...cp, 'effects', 'filesystem', kind, k]);
        });
      }
      for (const [k, v] of Object.entries(child.resources) as [keyof ActionDescriptor['resources'], number][])
        if (v > d.resources[k]) emit('AD_CHILD_EXCEEDS_PARENT', `children[${i}] resources.${k} is above the composite's cap`, [...cp, 'resources', k]);
      if (child.effects.network && !net) emit('AD_CHILD_EXCEEDS_PARENT', `children[${i}] uses the network but the composite declares none`, [...cp, 'effects', 'network']);
    });
  }
}

function checkCommand(argv: readonly string[], at: JsonPath, emit: Emit): void {
  const first = argv[0] as string;
  if (first.startsWith('/')) {
    const bad = checkAbsolutePath(first);
    if (bad || hasWildcard(first)) emit('AD_COMMAND_INVALID', `command[0] ${bad ?? 'has a wildcard'}`, [...at, 0]);
  } else if (!BARE_PROGRAM.test(first)) {
    emit('AD_COMMAND_INVALID', 'command[0] must be an absolute path or a bare program name (no relative path, no spaces: argv is not a shell line)', [...at, 0]);
  }
  argv.forEach((a, i) => {
    if (a.includes('\u0000')) emit('AD_COMMAND_INVALID', `command[${i}] contains a NUL character`, [...at, i]);
  });
  const { programs, background } = commandPrograms(argv);
  if (background) emit('AD_BACKGROUND_EXECUTION', 'command runs something in the background (`&`)', at);
  for (const prog of programs) {
    if ((BACKGROUND_PROGRAMS as readonly string[]).includes(prog)) emit('AD_BACKGROUND_EXECUTION', `command runs \`${prog}\`, which detaches from the run`, at);
    if ((PERSISTENCE_PROGRAMS as readonly string[]).includes(prog)) emit('AD_PERSISTENCE', `command runs \`${prog}\`, which schedules or installs something that outlives the action`, at);
    if (prog === 'sudo' || prog === 'doas' || prog === 'su' || prog === 'runuser' || prog === 'nsenter' || prog === 'chroot')
      emit('AD_HOST_ACCESS', `command runs \`${prog}\`: privilege or namespace changes are host access`, at);
  }
}

/** ISO-8601 with a zone, and a real calendar date (2025-02-30 is refused). */
export function validTimestamp(s: string): boolean {
  if (!ISO_TIMESTAMP.test(s)) return false;
  const t = Date.parse(s);
  if (Number.isNaN(t)) return false;
  const [y, m, d] = s.slice(0, 10).split('-').map(Number) as [number, number, number];
  const day = new Date(Date.UTC(y, m - 1, d));
  return day.getUTCFullYear() === y && day.getUTCMonth() === m - 1 && day.getUTCDate() === d && Number(s.slice(11, 13)) < 24;
}

// ---------------------------------------------------------------- parse / validate / render

/** All problems of an already-parsed value (also used for descriptors that arrive inside other documents). */
export function validateActionDescriptor(data: unknown, lineOf: (path: JsonPath) => number = () => 1): Result<ActionDescriptor> {
  if (data === null || typeof data !== 'object' || Array.isArray(data)) {
    return { ok: false, problems: [{ code: 'AD_SCHEMA', message: 'an Action Descriptor is a JSON object', line: 1 }] };
  }
  const parsed = ActionDescriptorSchema.safeParse(data);
  if (!parsed.success) return { ok: false, problems: schemaProblems(parsed.error.issues as SchemaIssue[], lineOf, codeForIssue) };
  const value = parsed.data as ActionDescriptor;
  const problems: Problem[] = [];
  checkDescriptor(value, [], 1, (code, message, path) => problems.push({ code, message, line: lineOf(path), path: formatPath(path) }), new Map());
  return problems.length ? { ok: false, problems } : { ok: true, value };
}

/** JSON documents Airlock tells apart by their top-level keys (see detect.ts). */
export function detectJsonKind(fileName: string, text: string): 'action-descriptor' | 'sandbox-result' | null {
  const kind = detectKind(fileName, text);
  return kind === 'action-descriptor' || kind === 'sandbox-result' ? kind : null;
}

export const actionDescriptorContract: Contract<ActionDescriptor> = {
  kind: 'action-descriptor',
  detect: (fileName, text) => detectJsonKind(fileName, text) === 'action-descriptor',
  parse(text) {
    const doc = parseJsonDocument(text);
    if (!doc.ok) return doc;
    return validateActionDescriptor(doc.value.data, doc.value.lineOf);
  },
  render: (value) => `${JSON.stringify(value, null, 2)}\n`,
  rules: actionDescriptorRules,
  schemas: { 'action-descriptor': ActionDescriptorSchema },
};
