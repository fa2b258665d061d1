import { parseJsonDocument } from './json-doc.js';
import type { DocumentKind } from './problem.js';
import type { Problem } from '../base/problem.js';

/**
 * Which kind of document a file is, decided from its name and first bytes without loading any
 * contract (the CLI then loads only the one it needs). Every contract's `detect` is this function,
 * so the registry order below is the only order there is.
 */
const REQUEST_TYPE_LINE = /^request_type:[ \t]*["']?tool_request["']?[ \t]*(?:#.*)?$/m;
const RESULT_TYPE_LINE = /^result_type:[ \t]*["']?tool_result["']?[ \t]*(?:#.*)?$/m;

const baseName = (fileName: string): string => fileName.slice(Math.max(fileName.lastIndexOf('/'), fileName.lastIndexOf('\\')) + 1);

function isToolRequest(fileName: string, text: string): boolean {
  const base = baseName(fileName);
  if (/^TR-.*\.md$/i.test(base)) return true;
  if (/^TS-/i.test(base)) return false;
  return text.startsWith('---') && REQUEST_TYPE_LINE.test(text.slice(0, 4096));
}

const isToolResult = (fileName: string, text: string): boolean =>
  /(?:^|[\\/])TS-[^\\/]*\.md$/.test(fileName) || (text.startsWith('---') && RESULT_TYPE_LINE.test(text.slice(0, 4096)));

// checkText calls detect and then parse on the same text: keep the last JSON read (parsing is pure).
let lastRead: { text: string; result: ReturnType<typeof parseJsonDocument> } | undefined;
export function readJsonOnce(text: string): ReturnType<typeof parseJsonDocument> {
  if (lastRead?.text !== text) lastRead = { text, result: parseJsonDocument(text) };
  return lastRead.result;
}

/** JSON documents are told apart by their top-level keys (a substring guess for unparseable text). */
function jsonKind(fileName: string, text: string): DocumentKind | null {
  if (!/\.json$/i.test(fileName)) return null;
  const r = readJsonOnce(text);
  if (r.ok) {
    const d = r.value.data;
    const keys = d !== null && typeof d === 'object' && !Array.isArray(d) ? new Set(Object.keys(d)) : new Set<string>();
    if (keys.has('descriptor_version')) return 'action-descriptor';
    if (keys.has('sandbox_id') && (keys.has('compliance') || keys.has('execution'))) return 'sandbox-result';
    if (keys.has('utp')) return 'utp';
    return null;
  }
  if (text.includes('"descriptor_version"')) return 'action-descriptor';
  if (text.includes('"sandbox_id"') && (text.includes('"compliance"') || text.includes('"execution"'))) return 'sandbox-result';
  // Broken JSON that looks like a UTP file still gets checked as one (and its JSON_* problem reported).
  if (/^\s*\{\s*"utp"\s*:/.test(text)) return 'utp';
  return null;
}

export function detectKind(fileName: string, text: string): DocumentKind | null {
  if (isToolRequest(fileName, text)) return 'tool-request';
  if (isToolResult(fileName, text)) return 'tool-result';
  return jsonKind(fileName, text);
}

export const unknownKindProblem = (): Problem => ({
  code: 'DOC_UNKNOWN_KIND',
  message: 'not a document Airlock knows (TR-*.md, TS-*.md, Action Descriptor, Sandbox Result or UTP JSON)',
});
