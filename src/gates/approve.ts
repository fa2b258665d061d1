import { closeSync, constants, fstatSync, openSync, readFileSync, unlinkSync } from 'node:fs';
import { inertLine } from '../base/inert-line.js';
import { basename, dirname, join } from 'node:path';
import type { Problem } from '../base/problem.js';
import { normalizeText } from '../contracts/text.js';
import { toolRequestContract, type ToolRequest } from '../contracts/tool-request.js';
import { loadOperatorKey } from '../approval/keys.js';
import { sha256Of, signApproval } from '../approval/signature.js';
import { checkInputs } from '../action/inputs.js';
import { openAuditLog } from '../audit/index.js';
import { workspaceId, type Workspace } from '../workspace/workspace.js';
import { writeAtomic } from '../base/write-atomic.js';

/** Sets `approved_by` / `approved_utc` in the front matter, adding them when missing. */
export function withApproval(text: string, operator: string, utc: string): string {
  const lines = normalizeText(text).split('\n');
  const close = lines.findIndex((l, i) => i > 0 && l.trimEnd() === '---');
  if (lines[0]?.trimEnd() !== '---' || close < 0) return text;
  const set = (key: string, value: string) => {
    const i = lines.findIndex((l, j) => j > 0 && j < close && l.startsWith(`${key}:`));
    const line = `${key}: ${JSON.stringify(value)}`;
    if (i >= 0) lines[i] = line;
    else lines.splice(close, 0, line);
  };
  set('approved_by', operator);
  set('approved_utc', utc);
  return lines.join('\n');
}

export interface PreparedApproval {
  request: ToolRequest;
  /** The exact bytes that will be signed and run. */
  text: string;
  inputsDir: string;
}

/** A regular file's bytes, opened once without following a link (null: no such file, a link or not a regular file). */
function readRegularFile(path: string): Buffer | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    return fstatSync(fd).isFile() ? readFileSync(fd) : null;
  } finally {
    closeSync(fd);
  }
}

/** Fills the approval fields and validates the whole request and its inputs (beside it). */
export function prepareApproval(file: string, operator: string, now: Date): { ok: true; value: PreparedApproval } | { ok: false; problems: Problem[] } {
  let raw: string;
  try {
    raw = readFileSync(file, 'utf8');
  } catch (e) {
    return { ok: false, problems: [{ code: 'RUN_NOT_RUNNABLE', message: `cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? e}` }] };
  }
  const utc = now.toISOString().replace(/\.\d{3}Z$/, 'Z');
  const filled = withApproval(raw, operator, utc);
  const parsed = toolRequestContract.parse(filled, { fileName: basename(file) });
  if (!parsed.ok) return { ok: false, problems: parsed.problems };
  const inputsDir = dirname(file);
  const bad = checkInputs(parsed.value.inputs, inputsDir);
  if (bad.length > 0) return { ok: false, problems: bad };
  // The canonical rendering is what is signed: stable bytes for the same request.
  return { ok: true, value: { request: parsed.value, text: toolRequestContract.render(parsed.value), inputsDir } };
}

/** What the operator sees before signing (every text from the draft made inert: inertLine). */
export function approvalSummary(r: ToolRequest): string {
  const fm = r.frontMatter;
  const lines = [
    `request   ${inertLine(fm.request_id)}`,
    `purpose   ${inertLine(fm.purpose)}`,
    `drafted   by ${inertLine(fm.requested_by)} at ${inertLine(fm.created_utc)}`,
    `runs      ${fm.backend === 'monty' ? 'Python code in the Monty interpreter (no filesystem but /in, /out)' : `${fm.language} in the ns sandbox`}`,
    ...(r.command ? [`command   ${inertLine(r.command.raw)}`] : [`code      ${(r.code ?? '').split('\n').length} lines:`, ...(r.code ?? '').split('\n').map((l) => `  | ${inertLine(l)}`)]),
    `inputs    ${r.inputs.length === 0 ? 'none' : ''}`,
    ...r.inputs.map((i) => `  ${inertLine(i.path)}  sha256 ${i.sha256}`),
    `outputs   ${inertLine(r.outputs.map((o) => o.path).join(', ')) || 'none'}`,
    `limits    cpu ${fm.cpu_limit} cores, memory ${fm.memory_limit_mb} MB, time ${fm.time_limit_sec} s`,
    `network   ${fm.network === 'none' ? 'none' : `allowlist: ${inertLine(fm.network_allowlist.join(', '))}`}`,
    `risk      ${inertLine(r.risk.level)} (${inertLine(r.risk.justification)}); data ${inertLine(r.risk.dataSensitivity)}`,
  ];
  return lines.join('\n') + '\n';
}

/**
 * Signs a prepared request, stores its inputs in the content-addressed input store and moves it
 * into requests_in/ (the .sig first, then the request, each atomically), and records the approval
 * in the audit log. `airlock approve` (after asking) and the library's `approve` both end here.
 */
export function commitApproval(args: { file: string; prepared: PreparedApproval; operator: string; keyDir: string; ws: Workspace; now: Date }): { ok: true; dest: string } | { ok: false; problems: Problem[] } {
  const key = loadOperatorKey(args.operator, args.keyDir);
  if ('error' in key) return { ok: false, problems: [{ code: 'APPROVAL_UNTRUSTED_KEY', message: key.error }] };
  // The inputs as they are now, read once each: the draft folder is the agent's, and the operator
  // may have read the summary for minutes. Only bytes with the hash that was shown are stored.
  const inputs: { sha256: string; bytes: Buffer }[] = [];
  for (const input of args.prepared.request.inputs) {
    const bytes = readRegularFile(join(args.prepared.inputsDir, input.name));
    const now = bytes === null ? 'not a regular file any more' : `its sha256 is now ${sha256Of(bytes)}`;
    if (bytes === null || sha256Of(bytes) !== input.sha256) {
      return { ok: false, problems: [{ code: 'APPROVAL_INPUT_CHANGED', message: `input ${input.name} changed after it was shown (${now}; the request declares ${input.sha256}): nothing was signed; approve the request again`, path: `inputs.${input.name}` }] };
    }
    inputs.push({ sha256: input.sha256, bytes });
  }
  const bytes = Buffer.from(args.prepared.text);
  const workspace = workspaceId(args.ws);
  if (workspace === null) return { ok: false, problems: [{ code: 'APPROVAL_OTHER_WORKSPACE', message: `${args.ws.root}/workspace-id is damaged: an approval could not name this workspace; nothing was signed (remove the file to make a new id: approvals given here before are then refused)` }] };
  const approval = signApproval({ requestId: args.prepared.request.frontMatter.request_id, bytes, operator: args.operator, key: key.key, publicKey: key.publicKey, now: args.now, workspace });
  // A stored input is named by its hash: one whose bytes are not that hash (written before this
  // check existed, or by hand) is replaced, never trusted for this request or later ones.
  for (const input of inputs) {
    const stored = join(args.ws.inputs, input.sha256);
    const have = readRegularFile(stored);
    if (have === null || sha256Of(have) !== input.sha256) writeAtomic(stored, input.bytes);
  }
  const dest = join(args.ws.requestsIn, basename(args.file));
  writeAtomic(`${dest}.sig`, JSON.stringify(approval, null, 2) + '\n');
  writeAtomic(dest, bytes);
  if (args.file !== dest) unlinkSync(args.file);
  openAuditLog(args.ws.auditFile).append({ type: 'approved', request_id: args.prepared.request.frontMatter.request_id, actor: args.operator, detail: { file: basename(dest) } });
  return { ok: true, dest };
}
