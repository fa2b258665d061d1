import * as z from 'zod';
import type { Problem, Result } from '../base/problem.js';
import { hostAccess } from '../contracts/action-descriptor.js';
import { checkAbsolutePath, globWithin, literalPrefix, pathSegments } from '../base/globs.js';
import { ID_PATTERN, MAX_ID_LENGTH, parseSubject } from '../contracts/utp.js';
import type { ToolRecord } from '../store/types.js';

/**
 * The tool registry rows (`resource.tools`, UTP section 2) and what Airlock reads in `options`:
 * how the tool runs (runner, lane, code or argv template), its limits, its declared effects, whether
 * a person must approve each call.
 *
 *   runner  python   `python.run`: arguments.code runs in the Monty lane when it loads, else python3 in
 *                    ns; with options.code the tool's own program runs instead, its arguments in
 *                    /in/arguments.json; options.lane pins the lane
 *           exec     `sandbox.exec`: arguments.argv runs as is (no shell) in the ns lane
 *           command  a fixed argv template; an element that is exactly `{{name}}` becomes the string
 *                    argument `name` (one argv element, never split, never a shell)
 *           echo     no sandbox: answers with the arguments (after `delay_ms`); for tests and benchmarks
 *   effects  beyond /out: host folders seen copy-on-write (`scope`), the changes the tool may make in
 *            them (`create`/`modify`/`delete` globs) and destinations it may reach (`network`, within
 *            the host policy's ceiling). The run is judged against them; the real files never change.
 */

export const RUNNERS = ['python', 'exec', 'command', 'echo'] as const;
export type Runner = (typeof RUNNERS)[number];

const ms = z.number().int().positive().max(24 * 3600 * 1000);
const absPath = z.string().min(2).max(4096).regex(/^\/[^\0]*$/, 'an absolute path');
const bytes = z.number().int().positive().max(64 * 1024 * 1024 * 1024);

export const toolOptionsSchema = z.strictObject({
  runner: z.enum(RUNNERS),
  argv: z.array(z.string().min(1).max(4096)).min(1).max(256).optional(),
  limits: z
    .strictObject({
      wall_ms: ms.optional(),
      cpu_ms: ms.optional(),
      memory_bytes: bytes.optional(),
      disk_bytes: bytes.optional(),
      pids: z.number().int().positive().max(4096).optional(),
      stdout_bytes: bytes.optional(),
      stderr_bytes: bytes.optional(),
    })
    .optional(),
  approval: z.strictObject({ required: z.boolean(), timeout_ms: ms.optional() }).optional(),
  description_for_approver: z.string().max(2000).optional(),
  lane: z.enum(['ns', 'monty']).optional(),
  code: z.string().min(1).max(256 * 1024).optional(),
  /** A signed tombstone (`airlock tools retire`): the tool is never run again, and an older registration put back is a rollback. */
  retired: z.literal(true).optional(),
  effects: z
    .strictObject({
      scope: z.array(absPath).max(16).default([]),
      create: z.array(absPath).max(256).default([]),
      modify: z.array(absPath).max(256).default([]),
      delete: z.array(absPath).max(256).default([]),
      network: z.array(z.string().min(1).max(512)).max(64).default([]),
    })
    .optional(),
});
export type ToolOptions = z.infer<typeof toolOptionsSchema>;

export const toolRules = [
  { code: 'UTPS_TOOL_NAME', spec: 'UTP 2: a tool row has project_id and tool_name (Airlock: identifiers of 1..256 characters, no control characters; project_id is a subject token).', fix: 'Use a name like `python.run` and a project id of [A-Za-z0-9_-].' },
  { code: 'UTPS_TOOL_SUBJECT', spec: 'UTP 4.1: target_subject is cg.<ver>.<project_id>.<channel_id>.cmd.tool.<target>...; Airlock: its project is the row\'s project_id and `cmd.tool.airlock.*` is reserved (cancel).', fix: 'Give a subject like cg.v1.<project>.<channel>.cmd.tool.python.run.' },
  { code: 'UTPS_TOOL_PARAMETERS', spec: 'UTP 2: `parameters` is the JSON Schema of the arguments (an object schema).', fix: 'Give a JSON Schema with "type": "object" that Airlock can compile.' },
  { code: 'UTPS_TOOL_OPTIONS', spec: 'Airlock: `options` says how the tool runs: runner, lane, code (python) or argv (command), limits, declared effects, approval.', fix: 'See docs/utp-service.md, "Tool options".' },
  { code: 'UTPS_TOOL_RETIRED', spec: 'Airlock: an operator retired the tool (a signed tombstone, `airlock tools retire`): it is never run again.', fix: 'Call another tool; an operator registers it again with `airlock tools add --operator NAME` if it is meant to come back.' },
  { code: 'UTPS_TOOL_AFTER_EXECUTION', spec: 'UTP 3.1: after_execution is suspend or terminate.', fix: 'Use suspend (the agent resumes) or terminate (the turn ends).' },
] as const;

/** Default limits (the sandbox needs every number); options.limits override, arguments.timeout_ms may only lower wall time. */
export const DEFAULT_TOOL_LIMITS = {
  wall_ms: 30_000,
  cpu_ms: 30_000,
  memory_bytes: 512 * 1024 * 1024,
  disk_bytes: 64 * 1024 * 1024,
  pids: 64,
  stdout_bytes: 1024 * 1024,
  stderr_bytes: 1024 * 1024,
} as const;

export const DEFAULT_APPROVAL_TIMEOUT_MS = 10 * 60 * 1000;

const timeoutParam = { type: 'integer', minimum: 100, maximum: 3_600_000, description: 'wall-clock limit in ms (at most the tool\'s own limit)' };

/** The built-in tools `airlock tools add --builtin NAME` registers. */
export const BUILTIN_TOOLS: Record<string, Pick<ToolRecord, 'description' | 'parameters' | 'options' | 'after_execution'>> = {
  'python.run': {
    description: 'Run a Python snippet in the sandbox (Monty when available, else python3 in the ns lane, no network). Returns stdout/stderr excerpts, exit code, outputs written to /out with hashes.',
    parameters: {
      type: 'object',
      properties: { code: { type: 'string', minLength: 1, maxLength: 65536 }, timeout_ms: timeoutParam },
      required: ['code'],
      additionalProperties: false,
    },
    options: { runner: 'python' },
    after_execution: 'suspend',
  },
  'sandbox.exec': {
    description: 'Run one program (argv, no shell) in the ns sandbox: read-only root, no network, writable /tmp and /out.',
    parameters: {
      type: 'object',
      properties: {
        argv: { type: 'array', items: { type: 'string', minLength: 1, maxLength: 4096 }, minItems: 1, maxItems: 256 },
        timeout_ms: timeoutParam,
      },
      required: ['argv'],
      additionalProperties: false,
    },
    options: { runner: 'exec' },
    after_execution: 'suspend',
  },
  echo: {
    description: 'Answer with the arguments, without a sandbox (for tests and benchmarks). `delay_ms` waits first.',
    parameters: { type: 'object', properties: { delay_ms: { type: 'integer', minimum: 0, maximum: 600000 } } },
    options: { runner: 'echo' },
    after_execution: 'suspend',
  },
};

const validName = (s: string): boolean => s.length >= 1 && s.length <= MAX_ID_LENGTH && ID_PATTERN.test(s);

/** Compiled argument validators, by the JSON text of the schema. */
const compiled = new Map<string, z.ZodType>();
/** The same, by the parameters object of a registry entry (kept across calls): no JSON text per call. */
const compiledFor = new WeakMap<object, z.ZodType>();

/** The zod validator of a tool's `parameters` (zod 4's fromJSONSchema), or the reason it cannot be compiled. */
export function compileParameters(parameters: unknown): { ok: true; schema: z.ZodType } | { ok: false; message: string } {
  const known = typeof parameters === 'object' && parameters !== null ? compiledFor.get(parameters) : undefined;
  if (known) return { ok: true, schema: known };
  let key: string;
  try {
    key = JSON.stringify(parameters);
  } catch {
    return { ok: false, message: 'parameters is not JSON' };
  }
  const hit = compiled.get(key);
  if (hit) {
    if (typeof parameters === 'object' && parameters !== null) compiledFor.set(parameters, hit);
    return { ok: true, schema: hit };
  }
  if (typeof parameters !== 'object' || parameters === null || Array.isArray(parameters) || (parameters as { type?: unknown }).type !== 'object') {
    return { ok: false, message: 'parameters must be a JSON Schema object with "type": "object"' };
  }
  try {
    const schema = z.fromJSONSchema(parameters as Parameters<typeof z.fromJSONSchema>[0]);
    if (compiled.size > 1000) compiled.clear();
    compiled.set(key, schema);
    compiledFor.set(parameters, schema);
    return { ok: true, schema };
  } catch (e) {
    return { ok: false, message: `parameters is not a JSON Schema Airlock can compile: ${(e as Error).message.slice(0, 300)}` };
  }
}

/** Checks arguments against the tool's parameters; problems name the argument path, never its value. */
export function checkArguments(tool: ToolRecord, args: unknown): Problem[] {
  const c = compileParameters(tool.parameters);
  if (!c.ok) return [{ code: 'UTPS_TOOL_PARAMETERS', message: `tool ${tool.tool_name}: ${c.message}` }];
  const r = c.schema.safeParse(args);
  if (r.success) return [];
  return r.error.issues.slice(0, 20).map((i) => ({
    code: 'UTPS_BAD_ARGUMENTS',
    message: `arguments${i.path.length ? '.' + i.path.join('.') : ''}: ${i.message}`,
    path: ['arguments', ...i.path.map(String)].join('.'),
  }));
}

/** Validates a registry row before it is stored. */
export function checkToolRecord(t: ToolRecord): Result<ToolRecord & { parsedOptions: ToolOptions }> {
  const problems: Problem[] = [];
  if (!/^[A-Za-z0-9_-]{1,128}$/.test(t.project_id)) problems.push({ code: 'UTPS_TOOL_NAME', message: 'project_id must be one subject token of [A-Za-z0-9_-]', path: 'project_id' });
  if (!validName(t.tool_name)) problems.push({ code: 'UTPS_TOOL_NAME', message: 'tool_name must be 1..256 characters without control characters or surrounding spaces', path: 'tool_name' });
  const s = parseSubject(t.target_subject);
  if (!s.ok) problems.push(...s.problems.map((p) => ({ code: 'UTPS_TOOL_SUBJECT', message: `${p.code}: ${p.message}`, path: 'target_subject' })));
  else if (s.value.kind !== 'tool') problems.push({ code: 'UTPS_TOOL_SUBJECT', message: 'target_subject must be a cmd.tool.* subject', path: 'target_subject' });
  else if (s.value.projectId !== t.project_id) problems.push({ code: 'UTPS_TOOL_SUBJECT', message: `target_subject is in project ${s.value.projectId}, the tool in ${t.project_id}`, path: 'target_subject' });
  else if (s.value.target === 'airlock') problems.push({ code: 'UTPS_TOOL_SUBJECT', message: 'cmd.tool.airlock.* is reserved for Airlock control commands (cancel)', path: 'target_subject' });
  if (t.after_execution !== 'suspend' && t.after_execution !== 'terminate') problems.push({ code: 'UTPS_TOOL_AFTER_EXECUTION', message: 'after_execution must be suspend or terminate', path: 'after_execution' });
  const c = compileParameters(t.parameters);
  if (!c.ok) problems.push({ code: 'UTPS_TOOL_PARAMETERS', message: c.message, path: 'parameters' });
  const o = toolOptionsSchema.safeParse(t.options);
  if (!o.success) problems.push(...o.error.issues.map((i) => ({ code: 'UTPS_TOOL_OPTIONS', message: `options${i.path.length ? '.' + i.path.join('.') : ''}: ${i.message}`, path: 'options' })));
  else if (o.data.runner === 'command' && !o.data.argv) problems.push({ code: 'UTPS_TOOL_OPTIONS', message: 'a command tool needs options.argv (the argv template)', path: 'options.argv' });
  else if (o.data.runner !== 'command' && o.data.argv) problems.push({ code: 'UTPS_TOOL_OPTIONS', message: 'options.argv is only for runner "command"', path: 'options.argv' });
  if (o.success) problems.push(...checkRunOptions(o.data));
  if (problems.length > 0 || !o.success) return { ok: false, problems };
  return { ok: true, value: { ...t, parsedOptions: o.data } };
}

/** Lane, code and declared effects: what only some runners take, and effects inside their scope. */
function checkRunOptions(o: ToolOptions): Problem[] {
  const problems: Problem[] = [];
  const bad = (path: string, message: string) => problems.push({ code: 'UTPS_TOOL_OPTIONS', message, path: `options.${path}` });
  if (o.lane === 'monty' && o.runner !== 'python') bad('lane', 'only the python runner can use the monty lane');
  if (o.code !== undefined && o.runner !== 'python') bad('code', 'options.code is only for runner "python"');
  if (o.runner === 'echo' && o.effects) bad('effects', 'the echo runner runs nothing: it has no effects to declare');
  if (o.retired && o.runner !== 'echo') bad('retired', 'a retired tool is written `{ "runner": "echo", "retired": true }` (airlock tools retire)');
  const fx = o.effects;
  if (fx) {
    if (o.lane === 'monty' && (fx.scope.length > 0 || fx.network.length > 0)) bad('effects', 'the monty lane has no host folders and no network: use lane "ns"');
    fx.scope.forEach((p, i) => {
      const why = checkAbsolutePath(p) ?? hostAccess(p);
      if (why) bad(`effects.scope.${i}`, `scope ${p.slice(0, 200)}: ${why}`);
      else if (literalPrefix(pathSegments(p)).length < 2) bad(`effects.scope.${i}`, 'a scope is a folder at least two levels deep');
    });
    const covers = fx.scope.map((p) => ({ pattern: p, mode: 'subtree' as const }));
    for (const kind of ['create', 'modify', 'delete'] as const) {
      fx[kind].forEach((p, i) => {
        const why = checkAbsolutePath(p);
        if (why) bad(`effects.${kind}.${i}`, `${p.slice(0, 200)} ${why}`);
        else if (!covers.some((c) => globWithin(c, p))) bad(`effects.${kind}.${i}`, `${p.slice(0, 200)} lies outside every effects.scope folder`);
      });
    }
  }
  return problems;
}

/** `cg.<ver>.<project>.<channel>.cmd.tool.<tool name split on dots>`: the default subject of a tool. */
export function defaultToolSubject(ver: string, projectId: string, channelId: string, toolName: string): string {
  return ['cg', ver, projectId, channelId, 'cmd', 'tool', ...toolName.split('.')].join('.');
}

/** The subject that cancels calls in a project/channel (Airlock's own; UTP defines no cancel). */
export function cancelSubject(ver: string, projectId: string, channelId: string): string {
  return ['cg', ver, projectId, channelId, 'cmd', 'tool', 'airlock', 'cancel'].join('.');
}
