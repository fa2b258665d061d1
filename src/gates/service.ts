import { copyFileSync, existsSync, lstatSync, readdirSync, readFileSync, renameSync, rmSync, watch, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { checkText, type Problem } from '../contracts/index.js';
import { toolResultContract } from '../contracts/tool-result.js';
import type { ToolRequest } from '../contracts/tool-request.js';
import { actionFromToolRequest } from '../action/from-tool-request.js';
import type { ApprovalEvidence } from '../approval/decide.js';
import { sha256Of } from '../approval/signature.js';
import { execute } from '../host/execute.js';
import { writeToolResult } from './tool-result-file.js';
import { sweepOrphans } from '../sandbox/ns/sweep.js';
import type { Workspace } from '../workspace/workspace.js';
import { moveInto, quarantine, readHandedFile } from './files.js';
import { writeAtomic } from '../base/write-atomic.js';
import { Ledger } from './ledger.js';
import type { GateLog } from './log.js';
import { ownedTempDir, ownerTag, tagOwner } from '../base/owner.js';

/** What the gate service records in the audit log (the hash-chained log implements it). */
export interface AuditSink {
  append(event: { type: string; request_id?: string; action_id?: string; sandbox_id?: string; actor?: string; detail?: Record<string, unknown> }): unknown;
}

export const gateRules = [
  { code: 'GATE_INTERRUPTED', spec: 'After a crash, a run that had started is reported as interrupted, never silently retried (at most once).', fix: 'Look at the request; if it should run again, draft and approve a new request.' },
  { code: 'GATE_RESULT_BLOCKED', spec: 'A result whose run the judge BLOCKed is not handed to the AI.', fix: 'Read the reasons: the program did something it did not declare.' },
] as const;

export interface GateOptions {
  ws: Workspace;
  log: GateLog;
  audit: AuditSink;
  /** Process what is waiting, then return. */
  once: boolean;
  signal?: AbortSignal;
  now?: () => Date;
}

const isRequest = (n: string) => n.endsWith('.md') && !n.startsWith('.');

/**
 * The filesystem gate: requests_in/ -> (claim) running/ -> run once -> results_out/ -> inbound/ or
 * quarantine/. Every move is an atomic rename; the replay ledger is written before anything runs.
 */
export async function serveGate(opts: GateOptions): Promise<{ processed: number }> {
  const { ws } = opts;
  const ledger = new Ledger(ws.storeFile);
  try {
    let processed = 0;
    for (;;) {
      // At start and after each wait: what a gate that died (this one before a restart, or another
      // sharing the workspace) left in running/ and the ledger; never what a live gate is running.
      recover(opts, ledger);
      const waiting = readdirSync(ws.requestsIn).filter(isRequest).sort();
      for (const name of waiting) {
        if (opts.signal?.aborted) break;
        if (await processOne(name, opts, ledger)) processed++;
      }
      if (opts.once || opts.signal?.aborted) return { processed };
      await waitForWork(ws.requestsIn, opts.signal);
    }
  } finally {
    ledger.close();
  }
}

/** Waits until something lands in `dir` (fs.watch, with a 1 s rescan in case an event is missed). */
function waitForWork(dir: string, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const watcher = watch(dir, () => done());
    const timer = setTimeout(() => done(), 1000);
    const onAbort = () => done();
    signal?.addEventListener('abort', onAbort);
    function done() {
      watcher.close();
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }
  });
}

// Who holds a claim: before it renames a request into running/, a gate writes the marker
// running/.<name>.<owner tag>.claim (its pid and start time, base/owner.ts) and removes it when the
// request has left running/. Several gates may share a workspace: a claim whose marker names a live
// process is that process's business; one with only dead markers (or none: an older gate's) is a
// crashed gate's. The marker comes first, so there is no moment where a live claim has none.
const CLAIM = /^\.(.+\.md)\.([0-9a-z]+\.[0-9a-z]+)\.claim$/;
const claimMarker = (ws: Workspace, name: string): string => join(ws.running, `.${name}.${ownerTag()}.claim`);

/** The requests in running/ that a live process holds; removes the markers of dead ones. */
function liveClaims(ws: Workspace): Set<string> {
  const live = new Set<string>();
  for (const n of readdirSync(ws.running)) {
    const m = CLAIM.exec(n);
    if (!m) continue;
    if (tagOwner(`-${m[2]}-`)?.alive) live.add(m[1]!);
    else rmSync(join(ws.running, n), { force: true });
  }
  return live;
}

/**
 * After a crash: a claimed request the ledger says was running is reported as interrupted
 * (quarantined with GATE_INTERRUPTED, never retried); a claimed request that never reached the
 * ledger never ran, so it goes back to requests_in/. A live gate's claims are left alone.
 */
function recover(opts: GateOptions, ledger: Ledger): void {
  const { ws, log } = opts;
  const now = opts.now?.() ?? new Date();
  const swept = sweepOrphans();
  if (swept.runs.length > 0) log.warn('swept', { runs: swept.runs, errors: swept.errors }, `cleaned the cgroups and mounts of ${swept.runs.length} sandbox run(s) left by a crashed process`);
  const live = liveClaims(ws);
  for (const entry of ledger.running()) {
    if (live.has(`${entry.request_id}.md`)) continue;
    ledger.finish(entry.request_id, 'interrupted', entry.sandbox_id, 'the gate service stopped while this request was running', now);
    opts.audit.append({ type: 'interrupted', request_id: entry.request_id, detail: { claimed_at: entry.claimed_at } });
    const file = join(ws.running, `${entry.request_id}.md`);
    if (existsSync(file)) {
      quarantine(file, ws.quarantine, { decision: 'REJECT', problems: [{ code: 'GATE_INTERRUPTED', message: `the gate stopped while this request was running (claimed ${entry.claimed_at}); it is not run again` }] });
    }
    log.warn('interrupted', { request_id: entry.request_id }, `${entry.request_id}: INTERRUPTED by a crash of the gate; quarantined, not retried`);
  }
  for (const name of readdirSync(ws.running).filter(isRequest)) {
    const id = basename(name, '.md');
    if (live.has(name) || ledger.get(id)) continue;
    moveInto(join(ws.running, name), ws.requestsIn);
    log.info('requeued', { request_id: id }, `${id}: claimed before a crash but never started; back in requests_in/`);
  }
}

async function processOne(name: string, opts: GateOptions, ledger: Ledger): Promise<boolean> {
  const marker = claimMarker(opts.ws, name);
  writeFileSync(marker, '', { mode: 0o600 });
  try {
    return await processClaimed(name, opts, ledger);
  } finally {
    rmSync(marker, { force: true });
  }
}

async function processClaimed(name: string, opts: GateOptions, ledger: Ledger): Promise<boolean> {
  const { ws, log, audit } = opts;
  const now = opts.now?.() ?? new Date();
  const claimed = join(ws.running, name);
  try {
    moveClaim(join(ws.requestsIn, name), claimed);
  } catch {
    return false; // another worker claimed it first
  }
  const reject = (problems: Problem[], stage: string, requestId?: string) => {
    const dest = quarantine(claimed, ws.quarantine, { decision: 'REJECT', stage, problems });
    audit.append({ type: 'quarantined', request_id: requestId, detail: { stage, codes: problems.map((p) => p.code), file: basename(dest) } });
    log.warn('quarantined', { request: name, stage, codes: problems.map((p) => p.code) }, `${name}: REJECT at ${stage} -> quarantine/ (${problems.map((p) => p.code).join(', ')})`);
    return true;
  };

  // A folder, fifo or link in requests_in/ is refused (quarantined), never read through or waited on.
  const read = readHandedFile(claimed);
  if ('problem' in read) return reject([read.problem], 'validate');
  const bytes = read.bytes;
  const checked = checkText(name, bytes.toString('utf8'));
  if (checked.problems.length > 0 || checked.kind !== 'tool-request') {
    return reject(checked.problems.length > 0 ? checked.problems : [{ code: 'RUN_NOT_RUNNABLE', message: `${name} is not a Tool Request` }], 'validate');
  }
  const tr = checked.value as ToolRequest;
  const id = tr.frontMatter.request_id;
  audit.append({ type: 'validated', request_id: id, ...(checked.warnings.length > 0 ? { detail: { warnings: codesOf(checked.warnings) } } : {}) });
  if (checked.warnings.length > 0) log.warn('warnings', { request_id: id, warnings: checked.warnings }, `${id}: accepted with warnings (${codesOf(checked.warnings).join(', ')})`);
  const action = actionFromToolRequest(tr);

  const inputsDir = ownedTempDir('gate-in');
  try {
    // Approval: an operator's signature, or the policy's own rule for the requests it may approve
    // alone; checked by the host core, as for every door. The replay ledger has the last word.
    const sigFile = `${claimed}.sig`;
    // Anything there, a link included, is read as readHandedFile reads (a link or a fifo is refused).
    const sig = lstatSync(sigFile, { throwIfNoEntry: false }) ? readHandedFile(sigFile) : null;
    const sigText = sig === null ? null : 'bytes' in sig ? sig.bytes.toString('utf8') : `(${sig.problem.message})`;
    const signed = { kind: 'signature', bytes, requestId: id, approvedBy: tr.frontMatter.approved_by, workspaceBound: true } as const;
    const approval: ApprovalEvidence = sigText !== null ? { ...signed, sigText } : action.lane === 'monty' && action.inputs.length === 0 ? { kind: 'policy-rule' } : { ...signed, sigText: null };
    // Once approved: the inputs from the store (as approved), then the replay ledger's claim.
    const claim = (): Problem[] => {
      const missing = action.inputs.filter((i) => !existsSync(join(ws.inputs, i.sha256)));
      if (missing.length > 0) return missing.map((i) => ({ code: 'RUN_INPUT_MISSING', message: `input ${i.name} (sha256 ${i.sha256}) is not in the workspace's input store: approve the request with \`airlock approve\`, which stores its inputs` }));
      for (const i of action.inputs) copyFileSync(join(ws.inputs, i.sha256), join(inputsDir, i.name));
      if (ledger.claim(id, sha256Of(bytes), now)) return [];
      const prior = ledger.get(id);
      return [{ code: 'APPROVAL_REPLAY', message: `request ${id} already ran (${prior?.state} since ${prior?.claimed_at}); a request runs at most once` }];
    };
    log.info('running', { request_id: id, lane: action.lane }, `${id}: running in the ${action.lane} lane...`);
    const started = Date.now();
    const done = await execute(ws, { action, door: 'gate', approval, inputsDir, language: tr.frontMatter.language, beforeRun: claim });
    if (done.kind === 'refused') {
      if (done.stage === 'run') ledger.finish(id, 'done', null, 'rejected before running', opts.now?.() ?? new Date());
      const stage = done.stage === 'guard' ? (done.problems.some((p) => p.code === 'RUN_INPUT_MISSING') ? 'inputs' : 'replay') : done.stage;
      return reject(done.problems, stage, id);
    }
    const outcome = done.outcome;
    const sr = outcome.sandboxResult;
    ledger.finish(id, 'done', outcome.sandboxId, sr.verdict.recommended_action, opts.now?.() ?? new Date());
    moveInto(claimed, ws.processed);

    // The Tool Result is untrusted data: written to results_out/, validated from there, then moved.
    const ts = writeToolResult(action, outcome);
    const out = join(ws.resultsOut, basename(ts.file));
    writeAtomic(out, readFileSync(ts.file));
    const parsed = toolResultContract.parse(readFileSync(out, 'utf8'), { fileName: basename(out) });
    // The document, and the run's whole output (the streams past the excerpt are artifacts): the same screen as every door.
    const problems: Problem[] = [...(parsed.ok ? [] : parsed.problems), ...outcome.screening.problems];
    const warnings: Problem[] = [...(parsed.warnings ?? []), ...outcome.screening.warnings];
    if (sr.verdict.recommended_action === 'BLOCK') problems.push(...sr.verdict.reasons.map((r) => ({ code: 'GATE_RESULT_BLOCKED', message: r })));
    const secs = ((Date.now() - started) / 1000).toFixed(2);
    const warned = warnings.length > 0 ? `; warnings: ${codesOf(warnings).join(', ')}` : '';
    if (problems.length === 0) {
      const dest = moveInto(out, ws.inbound);
      audit.append({ type: 'accepted', request_id: id, sandbox_id: outcome.sandboxId, detail: { result: basename(dest), ...(warnings.length > 0 ? { warnings: codesOf(warnings) } : {}) } });
      log.info('accepted', { request_id: id, result: dest, verdict: sr.verdict.recommended_action, warnings }, `${id}: ACCEPT -> inbound/${basename(dest)} (${sr.execution.status}, exit ${sr.execution.exit_code ?? sr.execution.signal}, ${sr.verdict.recommended_action}, ${secs} s${warned})`);
    } else {
      const dest = quarantine(out, ws.quarantine, { decision: 'REJECT', stage: 'result', verdict: sr.verdict.recommended_action, sandbox_id: outcome.sandboxId, problems, warnings });
      audit.append({ type: 'quarantined', request_id: id, sandbox_id: outcome.sandboxId, detail: { stage: 'result', codes: codesOf(problems), file: basename(dest) } });
      log.warn('quarantined', { request_id: id, result: dest, codes: problems.map((p) => p.code) }, `${id}: REJECT result -> quarantine/${basename(dest)} (${codesOf(problems).join(', ')}; ${secs} s${warned})`);
    }
    return true;
  } finally {
    rmSync(inputsDir, { recursive: true, force: true });
  }
}

const codesOf = (ps: Problem[]): string[] => [...new Set(ps.map((p) => p.code))];

/** Claims a request: the rename of the request decides who runs it; its .sig follows. */
function moveClaim(from: string, to: string): void {
  renameSync(from, to);
  if (existsSync(`${from}.sig`)) renameSync(`${from}.sig`, `${to}.sig`);
}
