import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { detectKind, unknownKindProblem } from '../contracts/detect.js';
import type { Contract, DocumentKind, Problem } from '../contracts/problem.js';
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
  /** Set when the file could not be read at all (exit 3). */
  readError?: string;
  problems: Problem[];
}

export async function checkFile(file: string): Promise<FileReport> {
  let bytes: Buffer;
  try {
    bytes = await readFile(file);
  } catch (e) {
    return { file, kind: null, valid: false, readError: (e as NodeJS.ErrnoException).code ?? String(e), problems: [] };
  }
  const decoded = decodeDocument(bytes);
  if ('problem' in decoded) return { file, kind: null, valid: false, problems: [decoded.problem] };
  const kind = detectKind(basename(file), decoded.text);
  if (!kind) return { file, kind: null, valid: false, problems: [unknownKindProblem()] };
  const r = (await load[kind]()).parse(decoded.text, { fileName: basename(file) });
  return { file, kind, valid: r.ok, problems: r.ok ? [] : r.problems };
}

export function formatReport(r: FileReport): string {
  if (r.readError) return `${r.file}: cannot read (${r.readError})\n`;
  const lines = r.problems.map((p) => `${r.file}:${p.line ?? 1}: ${p.code}: ${p.message}${p.path ? ` [${p.path}]` : ''}`);
  const kind = r.kind ?? 'unknown document';
  lines.push(r.valid ? `${r.file}: valid ${kind}` : `${r.file}: INVALID ${kind} (${r.problems.length} problem${r.problems.length === 1 ? '' : 's'})`);
  return lines.join('\n') + '\n';
}

/** Exit code of `airlock check`: 0 all valid, 2 any invalid, 3 any unreadable. */
export function checkExitCode(reports: FileReport[]): number {
  if (reports.some((r) => r.readError)) return 3;
  return reports.every((r) => r.valid) ? 0 : 2;
}

export async function explain(code: string): Promise<string | undefined> {
  const { allRules } = await import('../contracts/index.js');
  const found = allRules().find((r) => r.rule.code === code.toUpperCase());
  if (!found) return undefined;
  return `${found.rule.code} (${found.kind})\n  Rule: ${found.rule.spec}\n  Fix:  ${found.rule.fix}\n`;
}
