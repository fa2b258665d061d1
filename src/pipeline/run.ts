import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { screenContent, type Screening } from '../contracts/forbidden-content.js';
import type { Problem } from '../base/problem.js';
import { validateSandboxResultAgainst, type SandboxResult } from '../contracts/sandbox-result.js';
import type { Action } from '../action/action.js';
import { declarationOf } from '../action/declaration.js';
import { checkScopes } from '../policy/scopes.js';
import { judge, type Judgement } from '../judge/judge.js';
import { buildSandboxResult, renderSandboxResult } from '../report/sandbox-result.js';
import { runInMontyLane } from '../sandbox/lanes/monty.js';
import { runInNsLane, type LaneNetworkContext } from '../sandbox/lanes/ns.js';
import type { Observation, RunEvent } from '../sandbox/types.js';
import type { Workspace } from '../workspace/workspace.js';
import { scopesFile } from '../commit/load.js';
import { partialOf, stageFile } from '../base/staged-file.js';
import { OUT_FOLDER, openRunFolder, refillRunFolder, SANDBOX_RESULT_FILE } from './run-folder.js';

/**
 * In a run folder while its run goes on: the result's partial file, holding the owning process (pid
 * and start time) until the result replaces it. A folder left with it by a killed process is told
 * apart from a live one's. (`owner`: the same stamp in its own file, in folders of earlier versions.)
 */
export const RUN_OWNER_FILES = [partialOf(SANDBOX_RESULT_FILE), 'owner'];

/**
 * The stamp's second line, written as the run starts: what it runs. A run whose process is killed
 * never writes its result or its record; its `killed` audit record names the action from this.
 */
export const runNote = (a: Action): string =>
  `${JSON.stringify({ action_id: a.id, source: a.source, kind: a.kind, lane: a.lane, scope: a.scope.paths.slice(0, 8) })}\n`;
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
      observation: Observation;
      /**
       * What the run's untrusted output (the streams as kept, in full, and the paths it changed)
       * gave the result screen. Every door hands nothing on while it has problems (docs/forbidden-content.md).
       */
      screening: Screening;
      /** What the lane ran (argv as resolved), for the front door's own rendering. */
      argv: string[];
      /** Our own Sandbox Result failed its own validation: a bug, reported as an internal error. */
      selfCheckProblems: Problem[];
      /** Where the run's time went, host side (the lane's own phases: observation.timings). */
      timings: PipelineTimings;
    };

/**
 * The pipeline's phases, in ms: before (scope check, run folder), lane (the whole lane call; an ns
 * run's phases inside it are in observation.timings), judge (judge, Sandbox Result, cross-checks),
 * render (render and self-check), record (scope records, result file, artifacts), screen (result screen).
 * A few clock reads per run: measuring costs nothing a run would notice.
 */
export interface PipelineTimings {
  beforeMs: number;
  laneMs: number;
  judgeMs: number;
  renderMs: number;
  recordMs: number;
  screenMs: number;
}

/** A composite's timings: its children's, phase by phase (its own merge and render are not counted). */
export const sumTimings = (ts: PipelineTimings[]): PipelineTimings => {
  const sum: PipelineTimings = { beforeMs: 0, laneMs: 0, judgeMs: 0, renderMs: 0, recordMs: 0, screenMs: 0 };
  for (const t of ts) for (const k of Object.keys(sum) as (keyof PipelineTimings)[]) sum[k] += t[k];
  return sum;
};

/** sbx-<UTC time to the second>-<10 hex>: a run's id and its folder's name. */
export const newSandboxId = (): string => `sbx-${new Date().toISOString().replace(/[-:.]/g, '').slice(0, 15)}-${randomBytes(5).toString('hex')}`;

export interface RunContext {
  workspace: Workspace;
  inputsDir: string;
  network?: LaneNetworkContext;
  /** The policy's scope_roots; null or absent (no policy): an action with a scope is refused. */
  scopeRoots?: readonly string[] | null;
  signal?: AbortSignal;
  /** Progress and live output (an ns run's; a Monty run reports nothing until it ends). */
  onEvent?: (e: RunEvent) => void;
}

/**
 * The library entry point: one Action through sandbox, observation, judge and render. The caller
 * has validated the document and checked the inputs in `inputsDir`.
 */
export async function runAction(action: Action, ctx: RunContext): Promise<RunOutcome> {
  const t0 = performance.now();
  // The host decides where actions may act: outside the policy's scope_roots, or through a link, nothing runs.
  const refused = checkScopes(action, ctx.scopeRoots ?? null);
  if (refused.length > 0) return { kind: 'rejected', problems: refused };
  const sandboxId = newSandboxId();
  // The run's folder and its first files: made ahead by a service, else while the sandbox starts (a
  // new file or folder on a disk is its slowest metadata step); the lane runs nothing if it failed,
  // and makes out/ in it only when /out holds something. The Sandbox Result's file holds whose run
  // this is until the result replaces it; the scope records' is staged too when the action names
  // scopes. Both are published by a rename at the end (scope records first).
  const { runDir, made: folderMade, result: resultStaged } = openRunFolder(ctx.workspace.runs, sandboxId);
  const scopesStaged = action.scope.paths.length > 0 ? folderMade.then(() => stageFile(scopesFile(runDir), 0o600)) : null;
  for (const f of [folderMade, resultStaged, scopesStaged]) f?.catch(() => undefined); // awaited below
  resultStaged.then(
    (f) => {
      try {
        f.note(runNote(action));
      } catch {
        /* a killed run's record would name no action: no reason to stop this one */
      }
    },
    () => undefined,
  );
  const laneCtx = { inputsDir: ctx.inputsDir, outDir: join(runDir, OUT_FOLDER), outDirParent: folderMade, blobDir: ctx.workspace.blobs, tombstoneDir: ctx.workspace.tombstones, ...(ctx.network ? { network: ctx.network } : {}), ...(ctx.signal ? { signal: ctx.signal } : {}), ...(ctx.onEvent ? { onEvent: ctx.onEvent } : {}) };
  const tLane = performance.now();
  const lane = action.lane === 'monty' ? await runInMontyLane(action, laneCtx) : await runInNsLane(action, laneCtx);
  await resultStaged; // the run folder and its owner are there (or this throws, as before anything ran)
  if (!lane.ok) {
    for (const f of [resultStaged, scopesStaged]) (await f?.catch(() => null))?.discard();
    rmSync(runDir, { recursive: true, force: true }); // nothing ran: no run folder
    refillRunFolder(ctx.workspace.runs);
    return { kind: 'rejected', problems: lane.problems };
  }
  const tJudge = performance.now();
  const obs = lane.observation;
  const judgement = judge(action, obs);
  const tScopes = performance.now();
  // Promotion acts only on the scope roots this run acted on: their inode and owner, as opened.
  const records: ScopeRecord[] = obs.fs.scopes.map((s) => ({ path: s.hostPath, kind: s.kind, root: s.root.ident, owner: { uid: s.root.uid, gid: s.root.gid } }));
  const tBuild = performance.now();
  const sandboxResult = buildSandboxResult({ action, sandboxId, obs, judgement });
  if (action.source === 'action-descriptor') {
    // A second opinion from the contract's own cross-document checks: any finding blocks.
    const cross = validateSandboxResultAgainst(sandboxResult, declarationOf(action));
    if (cross.length > 0 && sandboxResult.verdict.recommended_action !== 'BLOCK') {
      sandboxResult.verdict = { recommended_action: 'BLOCK', reasons: [...sandboxResult.verdict.reasons, ...cross.map((p) => `${p.code}: ${p.message}`)].slice(0, 64) };
    }
  }
  const tRender = performance.now();
  const { text: rendered, self } = renderSandboxResult(sandboxResult);
  const tRecord = performance.now();
  const sandboxResultFile = join(runDir, SANDBOX_RESULT_FILE);
  const scopesFileStaged = await scopesStaged;
  if (records.length > 0 && scopesFileStaged) scopesFileStaged.publish(scopeRecordsText(records));
  else {
    scopesFileStaged?.discard();
    await writeScopeRecords(runDir, records); // no file was staged: an action that names no scope has no records
  }
  (await resultStaged).publish(rendered);
  // What the host kept of a stream beyond the Sandbox Result's excerpt is an artifact of the run.
  for (const name of ['stdout', 'stderr'] as const) {
    if (sandboxResult.outputs[name].captured_bytes >= obs[name].bytes.length) continue;
    mkdirSync(join(runDir, 'artifacts'), { recursive: true });
    writeFileSync(join(runDir, 'artifacts', `airlock-${name}.txt`), obs[name].bytes);
  }
  refillRunFolder(ctx.workspace.runs);

  const tScreen = performance.now();
  const screening = screenRun(obs, sandboxResult, judgement.unexpected);
  const timings: PipelineTimings = {
    beforeMs: tLane - t0,
    laneMs: tJudge - tLane,
    judgeMs: tScopes - tJudge + (tRender - tBuild),
    renderMs: tRecord - tRender,
    recordMs: tBuild - tScopes + (tScreen - tRecord),
    screenMs: performance.now() - tScreen,
  };
  return { kind: 'ran', sandboxId, runDir, sandboxResult, sandboxResultFile, judgement, observation: obs, argv: lane.argv, screening, selfCheckProblems: self.ok ? [] : self.problems, timings };
}

/**
 * The result screen of a run, the same for every door: the streams as the host kept them (all
 * of them, not only the excerpt a result shows: the rest is stored as an artifact), every path
 * the run changed (a file name is program output too), and the host's sentences about the run:
 * they quote what the program named (a path it tried, a socket, a host it asked the proxy for, its
 * own error text), so they are screened as program output, without the exemptions text the host
 * wrote itself gets ("tried to write /usr/said ignore all previous instructions" is not a report).
 */
export function screenRun(obs: Observation, sr: SandboxResult, unexpected: readonly string[]): Screening {
  const d = sr.filesystem_diff;
  const paths = [...d.added, ...d.modified, ...d.deleted].map((e) => e.path);
  return screenContent([
    { where: 'stdout', text: obs.stdout.bytes.toString('utf8') },
    { where: 'stderr', text: obs.stderr.bytes.toString('utf8') },
    { where: 'filesystem_diff (paths, one a line)', text: paths.join('\n') },
    { where: 'verdict.reasons (one a line)', text: oneLineEach(sr.verdict.reasons) },
    { where: 'unexpected behaviour (safety notes, one a line)', text: oneLineEach(unexpected) },
    { where: 'execution.termination_reason', text: oneLineEach([sr.execution.termination_reason]) },
  ]);
}

/** Host sentences one a line: a name the program chose may hold a line break, which would split a phrase the screen reads line by line. */
const oneLineEach = (xs: readonly string[]): string => xs.map((x) => x.replace(/[\r\n\u2028\u2029]+/g, ' ')).join('\n');

/** runs/<id>/scopes.json: what promotion checks before it acts (src/commit/scopes.ts, ScopeRecord). */
export async function writeScopeRecords(runDir: string, records: ScopeRecord[]): Promise<void> {
  if (records.length > 0) await writeFile(scopesFile(runDir), scopeRecordsText(records), { mode: 0o600 });
}

const scopeRecordsText = (records: ScopeRecord[]): string => JSON.stringify(records, null, 2) + '\n';
