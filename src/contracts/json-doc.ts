import type { Problem, Result } from '../base/problem.js';
import { MAX_DOCUMENT_BYTES, normalizeText } from './text.js';

/**
 * Safe reading of JSON documents (Action Descriptor, Sandbox Result, UTP payloads).
 *
 * Why not plain JSON.parse: it throws, it silently keeps the last of duplicate keys (a reviewer
 * may read one value while the host uses another), it recurses without a bound, and it gives no
 * line numbers. A small iterative scanner checks syntax, depth and duplicate keys first and records
 * where every key and array item starts; JSON.parse then builds the values (it is only given text
 * the scanner accepted, so it cannot throw or recurse deeply).
 */

/** A JSON path: object keys and array indexes from the root. */
export type JsonPath = readonly (string | number)[];

export interface JsonDocument {
  /** The parsed value (any JSON value; callers check it is the object they expect). */
  data: unknown;
  /** 1-based line of the deepest existing node on `path` (the key's line for object members). */
  lineOf(path: JsonPath): number;
}

/** Objects and arrays nested deeper than this are refused (JSON_TOO_DEEP). */
export const MAX_JSON_DEPTH = 64;

export const jsonRules = [
  {
    code: 'JSON_SYNTAX',
    spec: 'Airlock: a JSON document is exactly one valid JSON value (RFC 8259), nothing before or after it.',
    fix: 'Fix the JSON syntax at the line given (quotes, commas, brackets; no comments or trailing commas).',
  },
  {
    code: 'JSON_DUPLICATE_KEY',
    spec: 'Airlock: a key appears at most once per JSON object (parsers disagree on which duplicate wins).',
    fix: 'Remove the repeated key so each field is written once.',
  },
  {
    code: 'JSON_TOO_DEEP',
    spec: `Airlock: JSON objects and arrays nest at most ${MAX_JSON_DEPTH} levels deep.`,
    fix: 'Flatten the document; no Airlock document needs deep nesting.',
  },
] as const;

/** Where a key or item starts, and where its children start. */
interface PosNode {
  line: number;
  keys?: Map<string, PosNode>;
  items?: PosNode[];
}

interface Frame {
  kind: 'obj' | 'arr';
  node: PosNode;
  path: (string | number)[];
  /** The object key whose value is being read next (objects only). */
  key?: string;
  seen?: Set<string>;
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const ESCAPES = new Set(['"', '\\', '/', 'b', 'f', 'n', 'r', 't']);
const HEX4 = /^[0-9a-fA-F]{4}$/;

/** `a.b[0]["odd key"]`: the path notation every Problem uses. */
export function formatPath(path: JsonPath): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else if (/^[A-Za-z_][A-Za-z0-9_-]*$/.test(seg)) out += out === '' ? seg : `.${seg}`;
    else out += `[${JSON.stringify(seg)}]`;
  }
  return out;
}

/** A short, printable description of the character at `pos` (never a long slice of the input). */
function describeAt(text: string, pos: number): string {
  if (pos >= text.length) return 'end of document';
  const c = text[pos] as string;
  const code = c.charCodeAt(0);
  return code < 0x20 || code === 0x7f ? `control character U+${code.toString(16).padStart(4, '0')}` : `\`${c}\``;
}

/**
 * Parses one JSON document. Never throws on any string: syntax errors, duplicate keys, excessive
 * nesting and oversized input become Problems with 1-based lines. A leading BOM and CRLF are accepted.
 */
export function parseJsonDocument(rawText: string, opts: { maxDepth?: number; maxBytes?: number } = {}): Result<JsonDocument> {
  const maxDepth = opts.maxDepth ?? MAX_JSON_DEPTH;
  const maxBytes = opts.maxBytes ?? MAX_DOCUMENT_BYTES;
  if (rawText.length > maxBytes || Buffer.byteLength(rawText, 'utf8') > maxBytes) {
    return { ok: false, problems: [{ code: 'DOC_TOO_LARGE', message: `document is larger than ${maxBytes} bytes`, line: 1 }] };
  }
  const text = normalizeText(rawText);
  const n = text.length;
  let pos = 0;
  let line = 1;
  const problems: Problem[] = [];
  const syntax = (what: string): Result<JsonDocument> => ({
    ok: false,
    problems: [{ code: 'JSON_SYNTAX', message: `${what} (found ${describeAt(text, pos)})`, line }],
  });

  const skipWs = () => {
    while (pos < n) {
      const c = text.charCodeAt(pos);
      if (c === 0x0a) line++;
      else if (c !== 0x20 && c !== 0x09 && c !== 0x0d) break;
      pos++;
    }
  };
  /** Scans a string starting at the opening quote; returns its raw text or an error message. */
  const scanString = (): { raw: string } | { error: string } => {
    const start = pos;
    pos++;
    while (pos < n) {
      const c = text.charCodeAt(pos);
      if (c === 0x22) {
        pos++;
        return { raw: text.slice(start, pos) };
      }
      if (c < 0x20) return { error: 'control characters must be escaped inside strings' };
      if (c === 0x5c) {
        const e = text[pos + 1];
        if (e === 'u') {
          if (!HEX4.test(text.slice(pos + 2, pos + 6))) return { error: 'invalid \\u escape in string' };
          pos += 6;
        } else if (e !== undefined && ESCAPES.has(e)) pos += 2;
        else return { error: 'invalid escape in string' };
      } else pos++;
    }
    return { error: 'string is never closed' };
  };

  const stack: Frame[] = [];
  const root: PosNode = { line: 1 };
  // What the scanner expects next.
  let expect: 'value' | 'firstKey' | 'key' | 'colon' | 'afterValue' | 'firstItem' = 'value';
  // The position node the next value belongs to.
  let target: PosNode = root;
  let done = false;

  skipWs();
  root.line = line;
  while (!done) {
    skipWs();
    const frame = stack.at(-1);
    const c = text[pos];
    switch (expect) {
      case 'value':
      case 'firstItem': {
        if (expect === 'firstItem' && c === ']') {
          pos++;
          expect = 'afterValue';
          stack.pop();
          break;
        }
        if (frame?.kind === 'arr') {
          const item: PosNode = { line };
          (frame.node.items as PosNode[]).push(item);
          target = item;
        }
        if (c === '{' || c === '[') {
          if (stack.length >= maxDepth) {
            return {
              ok: false,
              problems: [{ code: 'JSON_TOO_DEEP', message: `objects and arrays nest more than ${maxDepth} levels deep`, line }],
            };
          }
          const parentPath = frame ? [...frame.path, frame.kind === 'arr' ? (frame.node.items as PosNode[]).length - 1 : (frame.key as string)] : [];
          pos++;
          if (c === '{') {
            target.keys = new Map();
            stack.push({ kind: 'obj', node: target, path: parentPath, seen: new Set() });
            expect = 'firstKey';
          } else {
            target.items = [];
            stack.push({ kind: 'arr', node: target, path: parentPath });
            expect = 'firstItem';
          }
          break;
        }
        if (c === '"') {
          const s = scanString();
          if ('error' in s) return syntax(s.error);
        } else if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) {
          NUMBER.lastIndex = pos;
          const m = NUMBER.exec(text);
          if (!m) return syntax('invalid number');
          pos += m[0].length;
        } else if (text.startsWith('true', pos)) pos += 4;
        else if (text.startsWith('false', pos)) pos += 5;
        else if (text.startsWith('null', pos)) pos += 4;
        else return syntax(pos >= n && stack.length === 0 ? 'document is empty: expected a JSON value' : 'expected a JSON value');
        expect = 'afterValue';
        break;
      }
      case 'firstKey':
      case 'key': {
        const obj = frame as Frame;
        if (expect === 'firstKey' && c === '}') {
          pos++;
          stack.pop();
          expect = 'afterValue';
          break;
        }
        if (c !== '"') return syntax('expected a quoted object key');
        const keyLine = line;
        const s = scanString();
        if ('error' in s) return syntax(s.error);
        let key: string;
        try {
          key = JSON.parse(s.raw) as string;
        } catch {
          return syntax('invalid object key');
        }
        const seen = obj.seen as Set<string>;
        if (seen.has(key)) {
          const path = [...obj.path, key];
          problems.push({
            code: 'JSON_DUPLICATE_KEY',
            message: `key ${JSON.stringify(key.slice(0, 80))} appears more than once in the same object`,
            line: keyLine,
            path: formatPath(path),
          });
        }
        seen.add(key);
        const member: PosNode = { line: keyLine };
        // The first occurrence keeps its line: that is where a reader looks first.
        if (!obj.node.keys?.has(key)) obj.node.keys?.set(key, member);
        obj.key = key;
        target = member;
        expect = 'colon';
        break;
      }
      case 'colon': {
        // An object member keeps its key's line (set above), wherever its value starts.
        if (c !== ':') return syntax('expected `:` after the object key');
        pos++;
        expect = 'value';
        break;
      }
      case 'afterValue': {
        if (!frame) {
          if (pos < n) return syntax('unexpected content after the JSON value');
          done = true;
          break;
        }
        if (c === ',') {
          pos++;
          expect = frame.kind === 'obj' ? 'key' : 'value';
        } else if (frame.kind === 'obj' && c === '}') {
          pos++;
          stack.pop();
        } else if (frame.kind === 'arr' && c === ']') {
          pos++;
          stack.pop();
        } else return syntax(frame.kind === 'obj' ? 'expected `,` or `}` in object' : 'expected `,` or `]` in array');
        break;
      }
    }
  }
  if (problems.length > 0) return { ok: false, problems };

  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    // Unreachable when the scanner is right; fail closed anyway.
    return { ok: false, problems: [{ code: 'JSON_SYNTAX', message: 'document is not valid JSON', line: 1 }] };
  }

  const lineOf = (path: JsonPath): number => {
    let node: PosNode = root;
    for (const seg of path) {
      const next = typeof seg === 'number' ? node.items?.[seg] : node.keys?.get(seg);
      if (!next) break;
      node = next;
    }
    return node.line;
  };
  return { ok: true, value: { data, lineOf } };
}

/** The parts of a zod issue Airlock reads (zod 4 `issues` entries). */
export interface SchemaIssue {
  code: string;
  path: PropertyKey[];
  message: string;
  keys?: string[];
}

/**
 * Turns schema issues into Problems with lines. `codeFor` picks the stable code for each issue
 * (a contract maps fields to its own codes); unknown fields get one Problem per key, at the key.
 */
export function schemaProblems(
  issues: readonly SchemaIssue[],
  lineOf: (path: JsonPath) => number,
  codeFor: (issue: SchemaIssue, path: JsonPath) => string,
): Problem[] {
  const out: Problem[] = [];
  for (const issue of issues) {
    const base = issue.path.filter((s): s is string | number => typeof s === 'string' || typeof s === 'number');
    if (issue.code === 'unrecognized_keys' && issue.keys) {
      for (const key of issue.keys) {
        const path = [...base, key];
        out.push({
          code: codeFor(issue, path),
          message: `unknown field ${JSON.stringify(key.slice(0, 80))}${base.length ? ` in \`${formatPath(base)}\`` : ''}: remove it (only fields of the published schema are allowed)`,
          line: lineOf(path),
          path: formatPath(path),
        });
      }
      continue;
    }
    const where = base.length ? `\`${formatPath(base)}\`` : 'document';
    const missing = /received undefined/.test(issue.message);
    out.push({
      code: codeFor(issue, base),
      message: missing ? `missing required field ${where}` : `${where}: ${issue.message}`,
      line: lineOf(base),
      path: formatPath(base),
    });
  }
  return out;
}
