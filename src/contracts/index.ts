import { actionDescriptorContract } from './action-descriptor.js';
import { detectKind, unknownKindProblem } from './detect.js';
import { jsonRules } from './json-doc.js';
import { markdownRules } from './markdown.js';
import type { Contract, DocumentKind, Rule } from './problem.js';
import type { Problem } from '../base/problem.js';
import { sandboxResultContract } from './sandbox-result.js';
import { normalizeText, textRules } from './text.js';
import { toolRequestContract } from './tool-request.js';
import { toolResultContract } from './tool-result.js';
import { utpContract } from './utp.js';

export type { Contract, DocumentKind, Rule } from './problem.js';
export type { Problem, Result } from '../base/problem.js';

export const contracts: readonly Contract<unknown>[] = [
  toolRequestContract as Contract<unknown>,
  toolResultContract as Contract<unknown>,
  actionDescriptorContract as Contract<unknown>,
  sandboxResultContract as Contract<unknown>,
  utpContract as Contract<unknown>,
];

export const checkRules: readonly Rule[] = [
  {
    code: 'DOC_UNKNOWN_KIND',
    spec: 'Airlock: every document checked is one of the kinds Airlock speaks (TR, TS, Action Descriptor, Sandbox Result, UTP payload).',
    fix: 'Check the file name and the front matter `request_type` / `result_type`, or the JSON fields that name the kind.',
  },
];

/** Every rule of every document, for --explain and docs/contracts.md. */
export function allRules(): { kind: DocumentKind | 'document'; rule: Rule }[] {
  const shared = [...textRules, ...markdownRules, ...jsonRules, ...checkRules].map((rule) => ({ kind: 'document' as const, rule }));
  return [...shared, ...contracts.flatMap((c) => c.rules.map((rule) => ({ kind: c.kind, rule })))];
}

export interface CheckOutcome {
  kind: DocumentKind | null;
  /** Errors: the document is rejected when there is any. */
  problems: Problem[];
  /** Reported, never a rejection (severity 'warning'). */
  warnings: Problem[];
  value?: unknown;
}

/** Detects the kind of a document and parses it with that contract. Never throws. */
export function checkText(fileName: string, rawText: string): CheckOutcome {
  const text = normalizeText(rawText);
  const kind = detectKind(fileName, text);
  const contract = kind && contracts.find((c) => c.kind === kind);
  if (!contract) return { kind: null, problems: [unknownKindProblem()], warnings: [] };
  const r = contract.parse(text, { fileName });
  const warnings = r.warnings ?? [];
  return r.ok ? { kind: contract.kind, problems: [], warnings, value: r.value } : { kind: contract.kind, problems: r.problems, warnings };
}
