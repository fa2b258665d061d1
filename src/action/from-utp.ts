import { createHash, randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { JsonObject } from '../contracts/utp.js';
import { DEFAULT_TOOL_LIMITS, type ToolOptions } from '../utp/tools.js';
import { DEFAULT_LIMITS, NO_PRECONDITIONS, type Action, type ActionLimits } from './action.js';

/**
 * A UTP tool call as an Action: the tool's options (runner, lane, code, limits, declared effects)
 * and the call's arguments. The argv is always Airlock's: arguments fill argv elements (sandbox.exec,
 * command templates) or a file (python), never flags of Airlock's own invocation.
 */

export function limitsFor(opts: ToolOptions, args: JsonObject): ActionLimits {
  const l = { ...DEFAULT_TOOL_LIMITS, ...opts.limits };
  const asked = typeof args.timeout_ms === 'number' && Number.isInteger(args.timeout_ms) && args.timeout_ms > 0 ? args.timeout_ms : undefined;
  const wallMs = asked === undefined ? l.wall_ms : Math.min(asked, l.wall_ms);
  return {
    wallMs,
    // At most one core's worth of the wall time: a floor above it (a short timeout_ms) asked the policy for more cores than it allows.
    cpuMs: Math.min(l.cpu_ms, wallMs),
    memoryBytes: l.memory_bytes,
    diskBytes: l.disk_bytes,
    files: DEFAULT_LIMITS.files,
    pids: l.pids,
    stdoutBytes: l.stdout_bytes,
    stderrBytes: l.stderr_bytes,
  };
}

export function toolAction(tool: { tool_name: string }, run: Action['run'], lane: Action['lane'], limits: ActionLimits, display: string, opts: ToolOptions): Action {
  const fx = opts.effects;
  const network = fx?.network ?? [];
  return {
    id: randomUUID(),
    source: 'utp',
    kind: `UTP_TOOL ${tool.tool_name}`,
    lane,
    run,
    inputs: [],
    outputsExpected: [],
    scope: { paths: fx?.scope ?? [], recursive: true },
    // /out is the tool's output area (reported with hashes); nothing else may change but what the
    // tool's options declare, inside its declared scope.
    effects: {
      create: ['/out/**', ...(fx?.create ?? [])],
      modify: ['/out/**', ...(fx?.modify ?? [])],
      delete: ['/out/**', ...(fx?.delete ?? [])],
      network: network.length > 0,
      systemStateChange: false,
    },
    limits,
    network: network.length > 0 ? { mode: 'allowlist', allowlist: network } : { mode: 'none', allowlist: [] },
    risk: 'LOW',
    confirmationRequired: false,
    rollbackSupported: true,
    sandboxRequired: true,
    preconditions: NO_PRECONDITIONS,
    cooldownOnRepeat: false,
    display: display.slice(0, 200),
  };
}

/** The argv of a `command` tool: elements that are exactly `{{name}}` take the string/number argument `name`. */
export function fillTemplate(template: string[], args: JsonObject): { argv: string[] } | { missing: string } {
  const argv: string[] = [];
  for (const t of template) {
    const m = /^\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}$/.exec(t);
    if (!m) {
      argv.push(t);
      continue;
    }
    const v = args[m[1] as string];
    if (typeof v === 'string' && v.length > 0) argv.push(v);
    else if (typeof v === 'number' && Number.isFinite(v)) argv.push(String(v));
    else return { missing: m[1] as string };
  }
  return { argv };
}

/**
 * A python Action in `lane`. In ns, the code is /in/main.py run by python3; in Monty it runs as is.
 * With `args` (a tool's own program), the call's arguments are /in/arguments.json in both lanes.
 */
export function pythonAction(tool: { tool_name: string }, lane: Action['lane'], code: string, args: JsonObject | undefined, limits: ActionLimits, inputsDir: string, opts: ToolOptions): Action {
  mkdirSync(inputsDir, { recursive: true, mode: 0o700 });
  const inputs: Action['inputs'] = [];
  const stage = (name: string, text: string) => {
    writeFileSync(join(inputsDir, name), text, { mode: 0o444 });
    inputs.push({ name, sha256: createHash('sha256').update(text).digest('hex') });
  };
  if (args !== undefined) stage('arguments.json', JSON.stringify(args));
  const first = code.split('\n')[0] ?? '';
  let action: Action;
  if (lane === 'monty') action = toolAction(tool, { kind: 'code', language: 'python', code }, 'monty', limits, `python (monty): ${first}`, opts);
  else {
    stage('main.py', code);
    action = toolAction(tool, { kind: 'argv', argv: ['python3', '/in/main.py'] }, 'ns', limits, `python (ns): ${first}`, opts);
  }
  action.inputs = inputs;
  return action;
}
