import type { ToolRequest } from '../contracts/tool-request.js';
import { DEFAULT_LIMITS, NO_PRECONDITIONS, type Action, type RiskLevel } from './action.js';

/**
 * A validated Tool Request as an Action. A TR has no filesystem scope: the program sees only
 * /in (read-only) and /out, so its only declared effects are the files it says it will create.
 */
export function actionFromToolRequest(tr: ToolRequest): Action {
  const fm = tr.frontMatter;
  const wallMs = fm.time_limit_sec * 1000;
  const monty = fm.backend === 'monty';
  const outputs = tr.outputs.map((o) => o.path);
  return {
    id: fm.request_id,
    source: 'tool-request',
    kind: 'TOOL_REQUEST',
    lane: monty ? 'monty' : 'ns',
    run: monty ? { kind: 'code', language: 'python', code: tr.code ?? '' } : { kind: 'argv', argv: tr.command?.argv ?? [] },
    inputs: tr.inputs.map((i) => ({ name: i.name, sha256: i.sha256 })),
    outputsExpected: outputs,
    scope: { paths: [], recursive: false },
    effects: { create: outputs, modify: [], delete: [], network: fm.network === 'allowlist', systemStateChange: false },
    limits: {
      wallMs,
      // cpu_limit is in cores: over the whole wall time the program may use that many core-seconds.
      cpuMs: Math.ceil(wallMs * fm.cpu_limit),
      memoryBytes: fm.memory_limit_mb * 1024 * 1024,
      diskBytes: DEFAULT_LIMITS.diskBytes,
      files: DEFAULT_LIMITS.files,
      pids: DEFAULT_LIMITS.pids,
      stdoutBytes: DEFAULT_LIMITS.stdoutBytes,
      stderrBytes: DEFAULT_LIMITS.stderrBytes,
    },
    network: { mode: fm.network, allowlist: fm.network_allowlist },
    risk: tr.risk.level.toUpperCase() as RiskLevel,
    confirmationRequired: tr.risk.level === 'high',
    rollbackSupported: true,
    preconditions: NO_PRECONDITIONS,
    cooldownOnRepeat: false,
    sandboxRequired: true,
    display: monty ? `monty: ${(tr.code ?? '').split('\n')[0] ?? ''}` : (tr.command?.raw ?? ''),
  };
}
