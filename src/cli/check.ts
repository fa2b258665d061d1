import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { allRules, checkText, type CheckOutcome, type Problem } from '../contracts/index.js';
import { decodeDocument } from '../contracts/text.js';

export interface FileReport {
  file: string;
  kind: CheckOutcome['kind'];
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
  const outcome = checkText(basename(file), decoded.text);
  return { file, kind: outcome.kind, valid: outcome.problems.length === 0, problems: outcome.problems };
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

export function explain(code: string): string | undefined {
  const found = allRules().find((r) => r.rule.code === code.toUpperCase());
  if (!found) return undefined;
  return `${found.rule.code} (${found.kind})\n  Rule: ${found.rule.spec}\n  Fix:  ${found.rule.fix}\n`;
}
