import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Action } from '../action/action.js';
import { fillTemplate, limitsFor, pythonAction, toolAction } from '../action/from-utp.js';
import { jsonParts, screenContent, type Screening } from '../contracts/forbidden-content.js';
import type { Problem } from '../base/problem.js';
import type { SandboxResult } from '../contracts/sandbox-result.js';
import { loadPolicy } from '../policy/load.js';
import type { ApprovalEvidence } from '../approval/decide.js';
import type { ExecuteOutcome } from '../host/execute.js';
import type { JsonObject, JsonValue, ToolError, ToolStatus } from '../contracts/utp.js';
import type { ToolRecord } from '../store/types.js';
import type { Workspace } from '../workspace/workspace.js';
import type { ToolOptions } from './tools.js';

/**
 * The UTP door's run of one validated call of a registered tool: translates it into an Action
 * (src/action/from-utp.ts), hands it to the host core (src/host/execute.ts) with the tool's
 * registration (or a verified approval) as its approval, and renders what comes back for the
 * tool.result card: the Sandbox Result summarised and screened.
 */

export interface Execution {
  status: ToolStatus;
  /** Built by Airlock only (host authority: no tool output lands at the top level, so never `__cg_control`). */
  result: JsonObject;
  error?: ToolError;
}

export const STDOUT_EXCERPT_CHARS = 4096;

let montyAvailable: Promise<boolean> | undefined;
/** Whether `@pydantic/monty` loads on this host (asked once). */
export function montyLoads(): Promise<boolean> {
  // require, not import(): the CLI bundle is CommonJS run from a code-cached vm.Script, where a
  // dynamic import() of a package is not available on Node 20.
  montyAvailable ??= Promise.resolve().then(() => {
    try {
      createRequire(import.meta.url)('@pydantic/monty');
      return true;
    } catch {
      return false;
    }
  });
  return montyAvailable;
}

const fail = (status: ToolStatus, code: string, message: string, detail?: JsonValue, result: JsonObject = {}): Execution => ({
  status,
  result: { ...result, error_code: code, error_message: message },
  error: detail === undefined ? { code, message } : { code, message, detail },
});

const sleep = (ms: number, signal: AbortSignal): Promise<'slept' | 'aborted'> =>
  new Promise((resolve) => {
    if (signal.aborted) return resolve('aborted');
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve('slept');
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      resolve('aborted');
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });

export interface ExecuteContext {
  workspace: Workspace;
  /** Aborted by a cancel command: the host's lanes kill the sandbox at once. */
  signal: AbortSignal;
  /** Who approved this call when its tool needs a person (a verified UTP approval); else the tool's registration does. */
  approval?: ApprovalEvidence;
  /** The call as the host core records it (ExecuteRequest.caller). */
  caller?: Readonly<Record<string, string>>;
}

/** Codes of a policy that could not be read at all (the host's fault, not the call's). */
const POLICY_UNUSABLE = new Set(['POLICY_MISSING', 'POLICY_UNREADABLE', 'POLICY_YAML', 'POLICY_FIELD', 'POLICY_OPERATOR_DUPLICATE', 'POLICY_NETWORK']);

export async function executeTool(tool: ToolRecord, opts: ToolOptions, args: JsonObject, ctx: ExecuteContext): Promise<Execution> {
  const limits = limitsFor(opts, args);
  if (opts.runner === 'echo') {
    const delay = typeof args.delay_ms === 'number' && args.delay_ms > 0 ? args.delay_ms : 0;
    if (delay > limits.wallMs) {
      await sleep(limits.wallMs, ctx.signal);
      return fail('timeout', 'tool_timeout', `echo: wall time ${limits.wallMs} ms exceeded`, { wall_ms: limits.wallMs });
    }
    if (delay > 0 && (await sleep(delay, ctx.signal)) === 'aborted') return fail('canceled', 'canceled', 'the call was canceled while it ran');
    return screened({ status: 'success', result: { runner: 'echo', echo: args } });
  }

  // The lane a python tool prefers follows the policy's lanes; the host core then holds the whole
  // call to the policy (and refuses when it is missing or invalid), as for every door.
  const policy = loadPolicy(ctx.workspace.policyFile);
  const allowsLane = (lane: Action['lane']) => policy.ok && policy.value.lanes.includes(lane);

  let action: Action;
  let inputsDir: string | undefined;
  const cleanup: string[] = [];
  // python: the tool's own program (options.code) gets the arguments as /in/arguments.json; else arguments.code runs.
  const code = opts.code ?? (typeof args.code === 'string' ? args.code : '');
  const toolArgs = opts.code !== undefined ? args : undefined;
  if (opts.runner === 'python') {
    // Monty has no host folders and no network: a tool that declares either runs in ns.
    const needsNs = (opts.effects?.scope.length ?? 0) > 0 || (opts.effects?.network.length ?? 0) > 0;
    const lane: Action['lane'] = opts.lane ?? (!needsNs && (await montyLoads()) && allowsLane('monty') ? 'monty' : 'ns');
    inputsDir = join(ctx.workspace.root, 'utp-inputs', randomUUID());
    cleanup.push(inputsDir);
    action = pythonAction(tool, lane, code, toolArgs, limits, inputsDir, opts);
  } else if (opts.runner === 'exec') {
    const argv = Array.isArray(args.argv) ? args.argv.filter((a): a is string => typeof a === 'string') : [];
    // A program the sandbox lacks ends with 127 there: no look at the host's own files here (its answer told the caller what exists outside).
    action = toolAction(tool, { kind: 'argv', argv }, 'ns', limits, argv.join(' '), opts);
  } else {
    const filled = fillTemplate(opts.argv ?? [], args);
    if ('missing' in filled) return fail('failed', 'bad_request', `argument ${filled.missing} must be a non-empty string or a number: it fills an argv element of ${tool.tool_name}`);
    action = toolAction(tool, { kind: 'argv', argv: filled.argv }, 'ns', limits, filled.argv.join(' '), opts);
  }

  try {
    let done = await run(action, inputsDir, tool, opts, ctx);
    // The Monty lane may not be wired into the host on this build: fall back to python3 in ns,
    // under the same policy.
    if (done.kind === 'refused' && done.stage === 'run' && action.lane === 'monty' && opts.lane !== 'monty' && done.problems.some((p) => p.code === 'LANE_ACTION_NOT_RUNNABLE')) {
      const dir = join(ctx.workspace.root, 'utp-inputs', randomUUID());
      cleanup.push(dir);
      action = pythonAction(tool, 'ns', code, toolArgs, limits, dir, opts);
      done = await run(action, dir, tool, opts, ctx);
    }
    if (done.kind === 'refused') return refusal(done, tool);
    return screened(summarise(done.outcome.sandboxResult, action), done.outcome.screening);
  } finally {
    for (const d of cleanup) rmSync(d, { recursive: true, force: true });
  }
}

/** A refusal of the host core as the call's answer: the policy's rule, the approval, or the sandbox's refusal. */
function refusal(done: Extract<ExecuteOutcome, { kind: 'refused' }>, tool: ToolRecord): Execution {
  const detail = { problems: done.problems.slice(0, 10).map((p) => ({ code: p.code, message: p.message })) } as JsonObject;
  if (done.stage === 'policy' && done.problems.some((p) => POLICY_UNUSABLE.has(p.code))) {
    return fail('failed', 'internal_error', 'the host policy (policy.yaml) is missing or invalid: nothing runs until it is fixed (`airlock policy check`)', detail);
  }
  if (done.stage === 'policy' || done.stage === 'approval') {
    return fail('failed', 'auth_failed', `the host policy does not allow this call of ${tool.tool_name}: ${done.problems.map((p) => p.message).join('; ').slice(0, 500)}`, detail);
  }
  const runtime = done.problems.some((p) => p.code === 'LANE_RUNTIME_MISSING');
  if (runtime && done.problems.some((p) => /python/i.test(p.message))) return fail('failed', 'upstream_unavailable', 'this host has no Python runtime for the sandbox', detail);
  if (runtime) return fail('failed', 'bad_request', 'the program to run was not found in the sandbox', detail);
  if (done.problems.some((p) => p.code.startsWith('POLICY_SCOPE'))) return fail('failed', 'auth_failed', `the host policy does not allow this call of ${tool.tool_name}: ${done.problems.map((p) => p.message).join('; ').slice(0, 500)}`, detail);
  return fail('failed', 'internal_error', 'the sandbox refused the action', detail);
}

async function run(action: Action, inputsDir: string | undefined, tool: ToolRecord, opts: ToolOptions, ctx: ExecuteContext): Promise<ExecuteOutcome> {
  const { execute } = await import('../host/execute.js');
  let dir = inputsDir;
  if (!dir) {
    dir = join(ctx.workspace.root, 'utp-inputs', 'empty');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }
  // A cancel aborts `signal`: both lanes (ns, monty) then kill the run at once (POLICY_ABORTED).
  const approval = ctx.approval ?? { kind: 'tool', record: tool };
  return execute(ctx.workspace, { action, door: 'utp', approval, inputsDir: dir, signal: ctx.signal, ...(ctx.caller ? { caller: ctx.caller } : {}), ...(opts.runner === 'python' ? { language: 'python' } : {}) });
}

const excerpt = (s: { text: string; total_bytes: number; truncated: boolean; sha256: string }): JsonObject => ({
  text: s.text.length > STDOUT_EXCERPT_CHARS ? s.text.slice(0, STDOUT_EXCERPT_CHARS) : s.text,
  total_bytes: s.total_bytes,
  truncated: s.truncated || s.text.length > STDOUT_EXCERPT_CHARS,
  sha256: s.sha256,
});

/** The Observation, summarised: verdict, status, exit code, stdout/stderr excerpts, /out files with hashes. */
export function summarise(sr: SandboxResult, action: Action): Execution {
  const outputs = [...sr.filesystem_diff.added, ...sr.filesystem_diff.modified]
    .filter((e) => e.path.startsWith('/out/') && e.type === 'file')
    .slice(0, 100)
    .map((e) => ({ path: e.path, sha256: e.sha256_after ?? null, size_bytes: e.size_bytes }));
  const x = sr.execution;
  const verdict = sr.verdict.recommended_action;
  const full: JsonObject = {
    lane: action.lane,
    sandbox_id: sr.sandbox_id,
    verdict: { recommended_action: sr.verdict.recommended_action, reasons: sr.verdict.reasons.slice(0, 10) },
    execution: { status: x.status, exit_code: x.exit_code, signal: x.signal, wall_time_ms: x.wall_time_ms, termination_reason: x.termination_reason.slice(0, 500) },
    stdout: excerpt(sr.outputs.stdout),
    stderr: excerpt(sr.outputs.stderr),
    outputs,
  };
  // A run the judge blocked hands nothing of its own to the agent, whatever its status: the gate
  // quarantines such a result (GATE_RESULT_BLOCKED); here the card keeps Airlock's facts and the reasons.
  const blocked = verdict === 'BLOCK' || verdict === 'FORCE_ROLLBACK';
  const result = blocked ? { ...airlockFacts(full), verdict: full.verdict as JsonObject } : full;
  const detail: JsonObject = { execution_status: x.status, termination_reason: x.termination_reason.slice(0, 500) };
  switch (x.status) {
    case 'TIMEOUT':
      return fail('timeout', 'tool_timeout', `the run exceeded its wall-clock limit of ${action.limits.wallMs} ms and was killed`, detail, result);
    case 'RESOURCE_KILLED':
      return fail('failed', 'resource_limit', 'the run went over a resource limit and was killed', detail, result);
    case 'POLICY_ABORTED':
      return fail('failed', 'policy_violation', 'the sandbox policy stopped the run', detail, result);
    case 'SANDBOX_ERROR':
      return fail('failed', 'upstream_unavailable', 'the sandbox could not run the action on this host', detail, result);
    case 'FAILURE':
      return fail('failed', 'nonzero_exit', `the program ended with ${x.exit_code === null ? `signal ${x.signal}` : `exit code ${x.exit_code}`}`, detail, result);
    default:
      break;
  }
  if (blocked) {
    return fail('failed', 'policy_violation', `the judge recommends ${verdict}: the run's output is withheld`, { ...detail, reasons: sr.verdict.reasons.slice(0, 10) }, result);
  }
  return { status: 'success', result };
}

/** Card fields screened in full by runAction (the streams: the card shows an excerpt; the judge's reasons; how the run ended). */
const SCREENED_BY_RUN = /^result\.(?:stdout\.text|stderr\.text|verdict\.reasons\[\d+\]|execution\.termination_reason)$/;

/**
 * The UTP door's result screen, the one every door applies (forbidden-content.ts): the run's
 * output in full (`run`, from runAction) and every string of the card's `result` (file names,
 * the judge's reasons, an echo's arguments). Content that fails is withheld, never sent: the call
 * answers failed / policy_violation, and the card says what was found (code, where, line) with
 * only Airlock's own facts about the run. Warnings ride along in `result.warnings`.
 */
export function screened(e: Execution, run?: Screening): Execution {
  const card = screenContent(jsonParts(e.result, 'result').filter((p) => !(run && SCREENED_BY_RUN.test(p.where))));
  const problems = [...(run?.problems ?? []), ...card.problems];
  if (problems.length > 0) return withheld(e, problems);
  const warnings = [...(run?.warnings ?? []), ...card.warnings];
  if (warnings.length > 0) e.result.warnings = warnings.slice(0, 20).map(findingJson);
  return e;
}

const findingJson = (p: Problem): JsonObject => ({ code: p.code, message: p.message.slice(0, 300), ...(p.path ? { path: p.path } : {}), ...(p.line ? { line: p.line } : {}) });

const obj = (v: JsonValue | undefined): Record<string, JsonValue> => (v !== null && typeof v === 'object' && !Array.isArray(v) ? v : {});
const pick = (o: Record<string, JsonValue>, keys: string[]): JsonObject => Object.fromEntries(keys.filter((k) => o[k] !== undefined).map((k) => [k, o[k] as JsonValue]));

/** Only Airlock's own facts about a run: enums, numbers, hashes, ids it made; the streams and file names are withheld. */
function airlockFacts(r: Record<string, JsonValue>): JsonObject {
  const stream = (v: JsonValue | undefined): JsonObject => ({ withheld: true, ...pick(obj(v), ['total_bytes', 'truncated', 'sha256']) });
  return {
    ...pick(r, ['runner', 'lane', 'sandbox_id']),
    ...(r.verdict !== undefined ? { verdict: pick(obj(r.verdict), ['recommended_action']) } : {}),
    ...(r.execution !== undefined ? { execution: pick(obj(r.execution), ['status', 'exit_code', 'signal', 'wall_time_ms']) } : {}),
    ...(r.stdout !== undefined ? { stdout: stream(r.stdout), stderr: stream(r.stderr) } : {}),
    ...(Array.isArray(r.outputs) ? { outputs: r.outputs.map((o) => pick(obj(o), ['sha256', 'size_bytes'])) } : {}),
    withheld: true,
  };
}

/** A result whose content failed the screen: Airlock's own facts and what was found. */
function withheld(e: Execution, problems: Problem[]): Execution {
  const findings = problems.slice(0, 20).map(findingJson);
  const result: JsonObject = { ...airlockFacts(e.result as Record<string, JsonValue>), findings };
  const codes = [...new Set(problems.map((p) => p.code))].join(', ');
  return fail('failed', 'policy_violation', `the result was withheld: its content failed Airlock's result validation (${codes})`, { findings, ...(e.error ? { run_error: e.error.code } : {}) }, result);
}
