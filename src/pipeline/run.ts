import { existsSync, lstatSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import type { ActionDescriptor } from '../contracts/action-descriptor.js';
import { checkText, type Problem } from '../contracts/index.js';
import { validateSandboxResultAgainst, type SandboxResult } from '../contracts/sandbox-result.js';
import { decodeDocument } from '../contracts/text.js';
import type { ToolRequest } from '../contracts/tool-request.js';
import { toolResultContract } from '../contracts/tool-result.js';
import type { Action } from '../action/action.js';
import { parsePolicy } from '../policy/policy.js';
import { checkScopes } from '../policy/scopes.js';
import { actionFromDescriptor } from '../action/from-action-descriptor.js';
import { actionFromToolRequest } from '../action/from-tool-request.js';
import { judge, type Judgement } from '../judge/judge.js';
import { sha256Hex } from '../report/hash.js';
import { buildSandboxResult, renderSandboxResult } from '../report/sandbox-result.js';
import { buildToolResult } from '../report/tool-result.js';
import { runInMontyLane } from '../sandbox/lanes/monty.js';
import { runInNsLane, type LaneNetworkContext } from '../sandbox/lanes/ns.js';
import type { NsRunObservation } from '../sandbox/types.js';
import type { Workspace } from '../workspace/workspace.js';
import { scopesFile } from '../commit/load.js';
import type { ScopeRecord } from '../commit/scopes.js';

export const runRules = [
  { code: 'RUN_NOT_RUNNABLE', spec: 'airlock run takes a Tool Request (TR-*.md) or an Action Descriptor (.json).', fix: 'Give a TR-*.md or an Action Descriptor JSON file.' },
  { code: 'RUN_INPUT_MISSING', spec: 'Issue 3: inputs are read from --inputs DIR (default: the request\'s folder) before anything runs.', fix: 'Put each declared input, by its name, in the inputs folder, or point --inputs at it.' },
  { code: 'RUN_INPUT_NOT_FILE', spec: 'Airlock: an input is a regular file (not a link, folder or device).', fix: 'Replace the input with a regular file.' },
  { code: 'RUN_INPUT_HASH_MISMATCH', spec: 'Issue 3: each input\'s sha256 is checked against the request before anything runs; a mismatch is a rejection.', fix: 'Use the exact file the request was approved for, or draft a new request with the new hash.' },
  { code: 'RUN_NOT_BUILT', spec: 'Airlock runs every descriptor type it can carry; the rest are refused with this code, never skipped.', fix: 'See the README\'s "not built yet" list.' },
] as const;

export type RunOutcome =
  | { kind: 'rejected'; problems: Problem[] }
  | {
      kind: 'ran';
      sandboxId: string;
      runDir: string;
      sandboxResult: SandboxResult;
      sandboxResultFile: string;
      judgement: Judgement;
      observation: NsRunObservation;
      toolResult?: { file: string; valid: boolean; problems: Problem[] };
      /** Our own Sandbox Result failed its own validation: a bug, reported as an internal error. */
      selfCheckProblems: Problem[];
    };

const newSandboxId = (): string => `sbx-${new Date().toISOString().replace(/[-:.]/g, '').slice(0, 15)}-${randomBytes(5).toString('hex')}`;

/** Validates and runs one document once; writes the Sandbox Result, the Tool Result and artifacts. */
export async function runFile(file: string, opts: { workspace: Workspace; inputsDir?: string }): Promise<RunOutcome> {
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch (e) {
    return { kind: 'rejected', problems: [{ code: 'RUN_NOT_RUNNABLE', message: `cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? e}` }] };
  }
  const decoded = decodeDocument(bytes);
  if ('problem' in decoded) return { kind: 'rejected', problems: [decoded.problem] };
  const checked = checkText(basename(file), decoded.text);
  if (checked.problems.length > 0) return { kind: 'rejected', problems: checked.problems };
  const inputsDir = opts.inputsDir ?? dirname(file);
  // The workspace policy's network section is the ceiling for any network a document asks for.
  const policy = existsSync(opts.workspace.policyFile) ? parsePolicy(readFileSync(opts.workspace.policyFile, 'utf8')) : null;
  if (policy && !policy.ok) return { kind: 'rejected', problems: policy.problems.map((p) => ({ ...p, message: `policy.yaml: ${p.message}` })) };
  const network = policy?.ok ? { ceiling: policy.value.network } : undefined;
  // No policy file: no scope is allowed (its scope_roots are what lets an action touch real files).
  const scopeRoots = policy?.ok ? policy.value.scope_roots : null;
  if (checked.kind === 'tool-request') {
    const tr = checked.value as ToolRequest;
    const bad = checkInputs(tr.inputs, inputsDir);
    if (bad.length > 0) return { kind: 'rejected', problems: bad };
    return runAction(actionFromToolRequest(tr), { workspace: opts.workspace, inputsDir, network, scopeRoots });
  }
  if (checked.kind === 'action-descriptor') {
    const descriptor = checked.value as ActionDescriptor;
    if (descriptor.action_type === 'MULTI_STEP_COMPOSITE') return (await import('./composite.js')).runComposite(descriptor, { workspace: opts.workspace, inputsDir, network, scopeRoots });
    const action = actionFromDescriptor(descriptor);
    if ('problems' in action) return { kind: 'rejected', problems: action.problems };
    return runAction(action, { workspace: opts.workspace, inputsDir, descriptor, network, scopeRoots });
  }
  return { kind: 'rejected', problems: [{ code: 'RUN_NOT_RUNNABLE', message: `${basename(file)} is a ${checked.kind}, not something to run` }] };
}

/** Every declared input is a regular file in `dir` whose sha256 is the declared one. */
export function checkInputs(inputs: { name: string; sha256: string }[], dir: string): Problem[] {
  const problems: Problem[] = [];
  for (const input of inputs) {
    const p = join(dir, input.name);
    if (!existsSync(p)) {
      problems.push({ code: 'RUN_INPUT_MISSING', message: `input ${input.name} is not in ${dir}`, path: `inputs.${input.name}` });
      continue;
    }
    if (!lstatSync(p).isFile()) {
      problems.push({ code: 'RUN_INPUT_NOT_FILE', message: `input ${p} is not a regular file`, path: `inputs.${input.name}` });
      continue;
    }
    const actual = sha256Hex(readFileSync(p));
    if (actual !== input.sha256) {
      problems.push({ code: 'RUN_INPUT_HASH_MISMATCH', message: `input ${input.name} has sha256 ${actual}, the request declares ${input.sha256}`, path: `inputs.${input.name}` });
    }
  }
  return problems;
}

export interface RunContext {
  workspace: Workspace;
  inputsDir: string;
  descriptor?: ActionDescriptor;
  network?: LaneNetworkContext;
  /** The policy's scope_roots; null or absent (no policy): an action with a scope is refused. */
  scopeRoots?: readonly string[] | null;
  signal?: AbortSignal;
}

/**
 * The library entry point: one Action through sandbox, observation, judge and render. The caller
 * has validated the document and checked the inputs in `inputsDir`.
 */
export async function runAction(action: Action, ctx: RunContext): Promise<RunOutcome> {
  // The host decides where actions may act: outside the policy's scope_roots, or through a link, nothing runs.
  const refused = checkScopes(action, ctx.scopeRoots ?? null);
  if (refused.length > 0) return { kind: 'rejected', problems: refused };
  const sandboxId = newSandboxId();
  const runDir = join(ctx.workspace.runs, sandboxId);
  mkdirSync(runDir, { recursive: true, mode: 0o700 });
  // Promotion (src/commit) re-reads the declaration the run was judged against.
  if (ctx.descriptor) writeFileSync(join(runDir, 'descriptor.json'), JSON.stringify(ctx.descriptor, null, 2) + '\n', { mode: 0o600 });
  const laneCtx = { inputsDir: ctx.inputsDir, outDir: join(runDir, 'out'), blobDir: ctx.workspace.blobs, tombstoneDir: ctx.workspace.tombstones, ...(ctx.network ? { network: ctx.network } : {}), ...(ctx.signal ? { signal: ctx.signal } : {}) };
  const lane = action.lane === 'monty' ? await runInMontyLane(action, laneCtx) : await runInNsLane(action, laneCtx);
  if (!lane.ok) return { kind: 'rejected', problems: lane.problems };
  const obs = lane.observation;
  const judgement = judge(action, obs);
  // Promotion acts only on the scope roots this run acted on: their inode and owner, as opened.
  writeScopeRecords(runDir, obs.fs.scopes.map((s) => ({ path: s.hostPath, kind: s.kind, root: s.root.ident, owner: { uid: s.root.uid, gid: s.root.gid } })));
  const sandboxResult = buildSandboxResult({ action, sandboxId, obs, judgement });
  if (ctx.descriptor) {
    // A second opinion from the contract's own cross-document checks: any finding blocks.
    const cross = validateSandboxResultAgainst(sandboxResult, ctx.descriptor);
    if (cross.length > 0 && sandboxResult.verdict.recommended_action !== 'BLOCK') {
      sandboxResult.verdict = { recommended_action: 'BLOCK', reasons: [...sandboxResult.verdict.reasons, ...cross.map((p) => `${p.code}: ${p.message}`)].slice(0, 64) };
    }
  }
  const { text: rendered, self } = renderSandboxResult(sandboxResult);
  const sandboxResultFile = join(runDir, 'sandbox-result.json');
  writeFileSync(sandboxResultFile, rendered);
  // What the host kept of a stream beyond the Sandbox Result's excerpt is an artifact of the run.
  for (const name of ['stdout', 'stderr'] as const) {
    if (sandboxResult.outputs[name].captured_bytes >= obs[name].bytes.length) continue;
    mkdirSync(join(runDir, 'artifacts'), { recursive: true });
    writeFileSync(join(runDir, 'artifacts', `airlock-${name}.txt`), obs[name].bytes);
  }

  let toolResult: { file: string; valid: boolean; problems: Problem[] } | undefined;
  if (action.source === 'tool-request') {
    const backend =
      action.lane === 'monty'
        ? `airlock-monty (@pydantic/monty in a warm worker${obs.host.seccomp ? `: bubblewrap ${obs.host.bwrapVersion}, seccomp on, cgroup v${obs.host.cgroupVersion ?? '-'}` : ', unsandboxed'})`
        : `airlock-ns (bubblewrap ${obs.host.bwrapVersion}, seccomp ${obs.host.seccomp ? 'on' : 'off'}, cgroup v${obs.host.cgroupVersion ?? '-'})`;
    const { result, artifacts } = buildToolResult({ action, argv: lane.argv, obs, judgement, backend });
    const artifactsDir = join(runDir, 'artifacts');
    for (const a of artifacts) {
      if (!a.bytes) continue;
      mkdirSync(artifactsDir, { recursive: true });
      writeFileSync(join(artifactsDir, a.path), a.bytes);
    }
    const text = toolResultContract.render(result);
    const name = `${result.result_id}.md`;
    // The result is untrusted data: validated like any document from outside.
    const parsed = toolResultContract.parse(text, { fileName: name });
    const tsFile = join(runDir, name);
    writeFileSync(tsFile, text);
    toolResult = { file: tsFile, valid: parsed.ok, problems: parsed.ok ? [] : parsed.problems };
  }
  return { kind: 'ran', sandboxId, runDir, sandboxResult, sandboxResultFile, judgement, observation: obs, toolResult, selfCheckProblems: self.ok ? [] : self.problems };
}

/** runs/<id>/scopes.json: what promotion checks before it acts (src/commit/scopes.ts, ScopeRecord). */
export function writeScopeRecords(runDir: string, records: ScopeRecord[]): void {
  if (records.length > 0) writeFileSync(scopesFile(runDir), JSON.stringify(records, null, 2) + '\n', { mode: 0o600 });
}
