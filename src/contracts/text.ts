import type { Problem } from '../base/problem.js';

/** Documents larger than this are refused before any parsing (a hostile file cannot exhaust us). */
export const MAX_DOCUMENT_BYTES = 1024 * 1024;

export const textRules = [
  {
    code: 'DOC_TOO_LARGE',
    spec: 'Airlock: a document is at most 1 MiB; larger ones are refused unparsed.',
    fix: 'Keep documents small: put large data in input files referenced by hash.',
  },
  {
    code: 'DOC_NOT_TEXT',
    spec: 'Airlock: a document is UTF-8 text without NUL bytes.',
    fix: 'Save the document as UTF-8 text; binary data belongs in input files.',
  },
] as const;

/**
 * Turns raw bytes into the text every parser sees: UTF-8, BOM removed, CRLF/CR normalised to LF.
 * Returns a problem instead when the bytes are too many or are not text.
 */
export function decodeDocument(bytes: Uint8Array): { text: string } | { problem: Problem } {
  if (bytes.length > MAX_DOCUMENT_BYTES) {
    return {
      problem: {
        code: 'DOC_TOO_LARGE',
        message: `document is ${bytes.length} bytes; the limit is ${MAX_DOCUMENT_BYTES}`,
      },
    };
  }
  if (bytes.includes(0)) return { problem: { code: 'DOC_NOT_TEXT', message: 'document contains NUL bytes (binary data)' } };
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return { problem: { code: 'DOC_NOT_TEXT', message: 'document is not valid UTF-8' } };
  }
  return { text: normalizeText(text) };
}

/** BOM and CRLF handling for text that is already a string (the library entry points). */
export function normalizeText(text: string): string {
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  return text.includes('\r') ? text.replace(/\r\n?/g, '\n') : text;
}
