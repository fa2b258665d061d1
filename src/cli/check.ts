import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { detectKind, unknownKindProblem } from '../contracts/detect.js';
import type { Contract, DocumentKind, Rule } from '../contracts/problem.js';
import type { Problem } from '../base/problem.js';
import { decodeDocument } from '../contracts/text.js';

/**
 * Only the detected document's contract is loaded: `airlock check` on one file does not pay for
 * the schemas of the other four (start-up time is benchmarked).
 */
const load: Record<DocumentKind, () => Promise<Contract<unknown>>> = {
  'tool-request': async () => (await import('../contracts/tool-request.js')).toolRequestContract as Contract<unknown>,
  'tool-result': async () => (await import('../contracts/tool-result.js')).toolResultContract as Contract<unknown>,
  'action-descriptor': async () => (await import('../contracts/action-descriptor.js')).actionDescriptorContract as Contract<unknown>,
  'sandbox-result': async () => (await import('../contracts/sandbox-result.js')).sandboxResultContract as Contract<unknown>,
  utp: async () => (await import('../contracts/utp.js')).utpContract as Contract<unknown>,
};

export interface FileReport {
  file: string;
  kind: DocumentKind | null;
  valid: boolean;
  /** Set when the file could not be read at all (bad input: exit 2, as for `airlock run`). */
  readError?: string;
  problems: Problem[];
  /** Reported, never a failure: the document departs from Airlock's own stricter form. */
  warnings: Problem[];
}

export async function checkFile(file: string): Promise<FileReport> {
  let bytes: Buffer;
  try {
    bytes = await readFile(file);
  } catch (e) {
    return { file, kind: null, valid: false, readError: (e as NodeJS.ErrnoException).code ?? String(e), problems: [], warnings: [] };
  }
  const decoded = decodeDocument(bytes);
  if ('problem' in decoded) return { file, kind: null, valid: false, problems: [decoded.problem], warnings: [] };
  const kind = detectKind(basename(file), decoded.text);
  if (!kind) return { file, kind: null, valid: false, problems: [unknownKindProblem()], warnings: [] };
  const r = (await load[kind]()).parse(decoded.text, { fileName: basename(file) });
  return { file, kind, valid: r.ok, problems: r.ok ? [] : r.problems, warnings: r.warnings ?? [] };
}

const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;

/** `FILE:LINE: CODE: message` per error, `FILE:LINE: warning: CODE: message` per warning, in line order; then the verdict. */
export function formatReport(r: FileReport): string {
  if (r.readError) return `${r.file}: cannot read (${r.readError})\n`;
  const all = [...r.problems, ...r.warnings].sort((a, b) => (a.line ?? 1) - (b.line ?? 1));
  const lines = all.map((p) => `${r.file}:${p.line ?? 1}: ${p.severity === 'warning' ? 'warning: ' : ''}${p.code}: ${p.message}${p.path ? ` [${p.path}]` : ''}`);
  const kind = r.kind ?? 'unknown document';
  const warned = r.warnings.length > 0 ? ` (${plural(r.warnings.length, 'warning')})` : '';
  lines.push(r.valid ? `${r.file}: valid ${kind}${warned}` : `${r.file}: INVALID ${kind} (${plural(r.problems.length, 'problem')}${r.warnings.length > 0 ? `, ${plural(r.warnings.length, 'warning')}` : ''})`);
  return lines.join('\n') + '\n';
}

/** Exit code of `airlock check`: 0 all valid (warnings do not count), 2 any invalid or unreadable (bad input, as for `airlock run`). */
export function checkExitCode(reports: FileReport[]): number {
  return reports.every((r) => r.valid && !r.readError) ? 0 : 2;
}

export async function explain(code: string): Promise<string | undefined> {
  const { allRules } = await import('../contracts/index.js');
  const found = allRules().find((r) => r.rule.code === code.toUpperCase()) ?? (await serviceRule(code.toUpperCase()));
  if (!found) return undefined;
  const r = found.rule;
  const source = r.source === undefined ? '' : `  Source: ${r.source === 'spec' ? 'the spec' : r.source === 'airlock' ? 'Airlock\'s own stricter choice' : 'the spec, checked more strictly by Airlock'}\n`;
  const severity =
    found.kind === 'utp service'
      ? '  How a worker answers it: docs/utp-service.md, "Rule codes"\n'
      : found.kind === 'approval'
        ? '  Where: `airlock approve` refuses to sign, or the gate quarantines the request with its reasons\n'
        : `  Severity: ${r.severity === 'warning' ? 'warning (reported, the document is still accepted)' : 'error (the document is rejected)'}\n`;
  return `${r.code} (${found.kind})\n  Rule: ${r.spec}\n  Fix:  ${r.fix}\n${severity}${source}${r.protects ? `  Protects: ${r.protects}\n` : ''}`;
}

/** The codes a UTP worker answers with (not document rules): its service, tool-row and registration checks; and a request's approval's. */
async function serviceRule(code: string): Promise<{ kind: string; rule: Rule } | undefined> {
  const [{ serviceRules }, { toolRules }, { registrationRules }, { approvalRules }] = await Promise.all([import('../utp/service.js'), import('../utp/tools.js'), import('../approval/tool-registration.js'), import('../approval/signature.js')]);
  const rule = [...serviceRules, ...toolRules, ...registrationRules].find((r) => r.code === code);
  if (rule) return { kind: 'utp service', rule };
  const approval = approvalRules.find((r) => r.code === code);
  return approval ? { kind: 'approval', rule: approval } : undefined;
}
