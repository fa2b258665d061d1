import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Action } from '../action/action.js';
import type { Problem } from '../base/problem.js';
import { toolResultContract } from '../contracts/tool-result.js';
import type { RunOutcome } from '../pipeline/run.js';
import { buildToolResult } from './tool-result-render.js';

export interface ToolResultFile {
  file: string;
  /** Valid when its contract and the result screen found no error: safe to hand on. */
  valid: boolean;
  problems: Problem[];
  warnings: Problem[];
}

/**
 * The ThreeGate door's answer to a Tool Request: the Tool Result (TS-*.md) in the run's folder,
 * rendered from what the host observed and judged, with the artifacts it names; then validated as
 * untrusted data, like any document from outside, and screened in full (the run's screening).
 */
export function writeToolResult(action: Action, run: Extract<RunOutcome, { kind: 'ran' }>): ToolResultFile {
  const obs = run.observation;
  const backend =
    action.lane === 'monty'
      ? `airlock-monty (@pydantic/monty in a warm worker${obs.host.seccomp ? `: bubblewrap ${obs.host.bwrapVersion}, seccomp on, cgroup v${obs.host.cgroupVersion ?? '-'}` : ', unsandboxed'})`
      : `airlock-ns (bubblewrap ${obs.host.bwrapVersion}, seccomp ${obs.host.seccomp ? 'on' : 'off'}, cgroup v${obs.host.cgroupVersion ?? '-'})`;
  const { result, artifacts } = buildToolResult({ action, argv: run.argv, obs, judgement: run.judgement, backend });
  const artifactsDir = join(run.runDir, 'artifacts');
  for (const a of artifacts) {
    if (!a.bytes) continue;
    mkdirSync(artifactsDir, { recursive: true });
    writeFileSync(join(artifactsDir, a.path), a.bytes);
  }
  const text = toolResultContract.render(result);
  const name = `${result.result_id}.md`;
  const parsed = toolResultContract.parse(text, { fileName: name });
  const file = join(run.runDir, name);
  writeFileSync(file, text);
  const problems = [...(parsed.ok ? [] : parsed.problems), ...run.screening.problems];
  return { file, valid: problems.length === 0, problems, warnings: [...(parsed.warnings ?? []), ...run.screening.warnings] };
}
