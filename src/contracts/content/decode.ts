/**
 * Encoded text hidden in untrusted output, decoded so the detectors can read it again: base64
 * (standard and url-safe, inline or wrapped over lines), hex (plain, spaced, `\x..`), percent-
 * encoding, ROT13, and runs of letters or short groups spaced apart (`A K I A …`, `AKIA IOSF …`).
 * Each decoder works on the normalised view (so fullwidth or zero-width-split encodings are seen
 * too) and returns the decoded text with the line it came from. Binary that decodes from base64
 * is classified by its magic bytes instead (an executable is a payload; a PNG is an image).
 */

export type Encoding = 'base64' | 'hex' | 'percent-encoded' | 'ROT13' | 'spaced-out' | 'Unicode tag';

export interface Decoded {
  /** 0-based line of the text the encoded run starts on. */
  line: number;
  text: string;
  via: Encoding;
  /** Only the secret detector reads it (collapsing spaced groups joins ordinary words too). */
  secretsOnly?: boolean;
}

export interface BinaryRun {
  line: number;
  kind: string;
}

/** Shortest base64 run worth decoding (12 bytes); shorter runs are ordinary words and ids. */
export const MIN_BASE64 = 16;
/** Shortest hex run worth decoding (8 bytes). */
const MIN_HEX = 16;
/** A base64 run this long that decodes to unknown binary is reported as a blob. */
export const MIN_BLOB = 120;

const ENCODED = new Uint8Array(128);
for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-=') ENCODED[c.charCodeAt(0)] = 1;
const isEncoded = (c: number) => c < 128 && ENCODED[c] === 1;

/** Decoded bytes that read as text: valid UTF-8, almost all printable. */
function asText(bytes: Buffer): string | null {
  if (bytes.length < 8) return null;
  let printable = 0;
  for (const b of bytes) if (b === 9 || b === 10 || b === 13 || (b >= 0x20 && b !== 0x7f)) printable++;
  if (printable < bytes.length * 0.95) return null;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

const MAGIC: [number[], string | null][] = [
  [[0x7f, 0x45, 0x4c, 0x46], 'base64 of an executable or archive'], // ELF
  [[0x4d, 0x5a], 'base64 of an executable or archive'], // PE (MZ)
  [[0xcf, 0xfa, 0xed, 0xfe], 'base64 of an executable or archive'], // Mach-O
  [[0x23, 0x21], 'base64 of an executable or archive'], // #!
  [[0x1f, 0x8b], 'base64 of an executable or archive'], // gzip
  [[0x50, 0x4b, 0x03, 0x04], 'base64 of an executable or archive'], // zip, jar, docx
  [[0x00, 0x61, 0x73, 0x6d], 'base64 of an executable or archive'], // wasm
  [[0x89, 0x50, 0x4e, 0x47], null], // PNG
  [[0xff, 0xd8, 0xff], null], // JPEG
  [[0x47, 0x49, 0x46, 0x38], null], // GIF
  [[0x52, 0x49, 0x46, 0x46], null], // RIFF (WebP, WAV)
  [[0x00, 0x00, 0x00], null], // SSH public key blob (length-prefixed "ssh-rsa"), ISO media (ftyp)
];

/** What binary decoded from base64 is: a payload kind, null for known media, undefined when unknown. */
function classifyBinary(bytes: Buffer): string | null | undefined {
  for (const [magic, kind] of MAGIC) if (magic.every((b, i) => bytes[i] === b)) return kind;
  return undefined;
}

/** Line index of each offset, for offsets visited in increasing order. */
function lineCounter(text: string): (index: number) => number {
  let pos = 0;
  let line = 0;
  return (index) => {
    for (let i = text.indexOf('\n', pos); i !== -1 && i < index; i = text.indexOf('\n', i + 1)) line++;
    pos = Math.max(pos, index);
    return line;
  };
}

const HEX_RUN = /^[0-9a-fA-F]+$/;

/**
 * Runs of base64/hex characters: a run filling a whole line joins the next such lines (MIME wraps
 * base64 at 64 or 76 characters). One pass, each character read once.
 */
function encodedRuns(text: string): { index: number; run: string }[] {
  const runs: { index: number; run: string }[] = [];
  const n = text.length;
  let i = 0;
  while (i < n) {
    if (!isEncoded(text.charCodeAt(i))) {
      i++;
      continue;
    }
    let j = i + 1;
    while (j < n && isEncoded(text.charCodeAt(j))) j++;
    let run = text.slice(i, j);
    // A whole line: keep joining following whole-line runs.
    const lineStart = i === 0 || text.charCodeAt(i - 1) === 10;
    while (lineStart && text.charCodeAt(j) === 10 && run.length >= MIN_BASE64) {
      let k = j + 1;
      while (k < n && isEncoded(text.charCodeAt(k))) k++;
      if (k === j + 1 || (k < n && text.charCodeAt(k) !== 10)) break;
      run += text.slice(j + 1, k);
      j = k;
    }
    if (run.length >= MIN_BASE64) runs.push({ index: i, run });
    i = j;
  }
  return runs;
}

/** Base64 and hex runs: decoded text to scan again, and binary that is a payload. */
export function decodeRuns(text: string, out: Decoded[], binary: BinaryRun[]): void {
  const lineAt = lineCounter(text);
  for (const { index, run } of encodedRuns(text)) {
    // `key=value`: an `=` inside a run ends one value (padding is only at the end).
    for (const piece of run.split(/=+(?=[^=])/)) {
      const body = piece.replace(/^[-_]+/, '');
      if (body.length < MIN_BASE64) continue;
      if (HEX_RUN.test(body)) {
        const t = body.length >= MIN_HEX && body.length % 2 === 0 ? asText(Buffer.from(body, 'hex')) : null;
        if (t !== null) out.push({ line: lineAt(index), text: t, via: 'hex' });
        else if (body.length > 128) binary.push({ line: lineAt(index), kind: 'long hex blob' }); // longer than a sha512 digest
        continue;
      }
      const bytes = Buffer.from(body, 'base64');
      const t = asText(bytes);
      if (t !== null) {
        out.push({ line: lineAt(index), text: t, via: 'base64' });
        continue;
      }
      const kind = classifyBinary(bytes);
      if (kind) binary.push({ line: lineAt(index), kind });
      else if (kind === undefined && body.length >= MIN_BLOB && /[A-Z]/.test(body) && /[a-z]/.test(body) && /[0-9]/.test(body)) {
        binary.push({ line: lineAt(index), kind: 'long base64 blob' });
      }
    }
  }
}

/** `69 67 6e 6f`, `69:67:6e`, `\x69\x67`, `0x69, 0x67`: hex bytes with separators. */
const SPACED_HEX = /(?:(?:\\x|0x)?[0-9a-fA-F]{2}(?:[ :,-]|, ?|(?=\\x))){7,}(?:\\x|0x)?[0-9a-fA-F]{2}/g;
/** Runs holding at least three %XX escapes. */
const PERCENT = /[^\s%]{0,64}(?:%[0-9A-Fa-f]{2}[^\s%]{0,64}){3,}/g;
/** Single characters spaced apart, or groups of at most four (spaced-out keys and words). */
const SPACED_CHARS = /(?<![\w])(?:[A-Za-z0-9+/=_] ){4,}[A-Za-z0-9+/=_](?![\w])/g;
const SPACED_GROUPS = /(?<![\w-])(?:[A-Za-z0-9+/=_]{1,4}[ .-]){4,}[A-Za-z0-9+/=_]{1,4}(?![\w])/g;
/** Secret prefixes (secrets.ts) a collapsed group run must hold to be worth scanning. */
const SECRET_START = /AKIA|ASIA|AIza|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|[rs]k_live_|sk-|eyJ/;
/** ROT13 of words injected text is made of ("ignore", "instructions", "sandbox", "curl", …). */
const ROT13_STEMS = /\b(?:vtaber|qvfertneq|vafgehpgvba|cerivbhf|fnaqobk|qvfnoyr|cbyvpl|nyybjyvfg|rkrphgr|qbjaybnq|phey|jtrg|cyrnfr|flfgrz|cebzcg|nccebir|nqzva|cnffjbeq|gbxra|frperg|NXVN|tuc_)/i;

const rot13 = (s: string) => s.replace(/[A-Za-z]/g, (c) => String.fromCharCode(((c.charCodeAt(0) & 0x1f) + 12) % 26 + (c.charCodeAt(0) & 0xe0) + 1));

function decodePercent(run: string): string | null {
  try {
    return decodeURIComponent(run.replace(/\+/g, ' '));
  } catch {
    return run.replace(/%([0-9A-Fa-f]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16)));
  }
}

/** Calls `f` with each match of the global `re` and its 0-based line. */
function eachMatch(re: RegExp, text: string, f: (m: RegExpExecArray, line: number) => void): void {
  re.lastIndex = 0;
  const lineAt = lineCounter(text);
  for (let m = re.exec(text); m !== null; m = re.exec(text)) f(m, lineAt(m.index));
}

/**
 * Every decodable run of the (normalised) text, and the binary payloads among them. Cheap tests
 * first: most output has no run long enough, no `%`, no spaced letters and no ROT13 stems.
 */
export function decodeAll(view: string): { decoded: Decoded[]; binary: BinaryRun[] } {
  const decoded: Decoded[] = [];
  const binary: BinaryRun[] = [];
  decodeRuns(view, decoded, binary);
  if (view.includes('%')) {
    eachMatch(PERCENT, view, (m, line) => {
      const t = decodePercent(m[0]);
      if (t !== null && t !== m[0]) decoded.push({ line, text: t, via: 'percent-encoded' });
    });
  }
  eachMatch(SPACED_HEX, view, (m, line) => {
    const hex = m[0].replace(/\\x|0x|[^0-9a-fA-F]/g, '');
    const t = asText(Buffer.from(hex, 'hex'));
    if (t !== null) decoded.push({ line, text: t, via: 'hex' });
  });
  let lastSpaced = -1;
  eachMatch(SPACED_CHARS, view, (m, line) => {
    if (line !== lastSpaced) decoded.push({ line, text: spacedLine(view, m.index), via: 'spaced-out' });
    lastSpaced = line;
  });
  eachMatch(SPACED_GROUPS, view, (m, line) => {
    const joined = m[0].replace(/[ .-]/g, '');
    if (SECRET_START.test(joined)) decoded.push({ line, text: joined, via: 'spaced-out', secretsOnly: true });
  });
  if (ROT13_STEMS.test(view)) {
    const lines = view.split('\n');
    lines.forEach((l, i) => {
      if (ROT13_STEMS.test(l)) decoded.push({ line: i, text: rot13(l), via: 'ROT13' });
    });
  }
  return { decoded, binary };
}

/** The line holding `index`, with every run of spaced single characters closed up into a word. */
function spacedLine(view: string, index: number): string {
  const start = view.lastIndexOf('\n', index) + 1;
  const end = view.indexOf('\n', index);
  const line = view.slice(start, end === -1 ? view.length : end);
  return line.replace(SPACED_CHARS, (s) => s.replace(/ /g, ''));
}
