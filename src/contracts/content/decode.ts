/**
 * Encoded text hidden in untrusted output, decoded so the detectors can read it again: base64
 * (standard and url-safe, inline or wrapped over lines), hex (plain, spaced, `\x..`), percent- and
 * form-encoding, HTML and string character escapes, ROT13, and runs of letters or short groups
 * spaced apart (`A K I A …`, `AKIA IOSF …`). Each decoder works on the normalised view (so
 * fullwidth or zero-width-split encodings are seen too) and returns the decoded text with the line
 * it came from. Binary that decodes from base64 is classified by its magic bytes instead (an
 * executable is a payload; a PNG is an image).
 */

export type Encoding = 'base64' | 'hex' | 'percent-encoded' | 'escaped' | 'ROT13' | 'spaced-out' | 'Unicode tag' | 'right-to-left reversed';

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
const MIN_BASE64 = 16;
/** Shortest hex run worth decoding (8 bytes). */
const MIN_HEX = 16;
/** A base64 run this long that decodes to unknown binary is reported as a blob. */
const MIN_BLOB = 120;

/** Token characters: letters, digits, `_ + / =`. A `-` joins tokens into one encoded run (base64url). */
const TOKEN = new Uint8Array(128);
for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_=') TOKEN[c.charCodeAt(0)] = 1;
const isToken = (c: number) => c < 128 && TOKEN[c] === 1;

/**
 * Decoded bytes that read as text: valid UTF-8 without control characters (tab and newlines
 * aside). Checked by hand, leaving at the first bad byte: random bytes (a digest, an id decoded
 * by mistake) fail within a few bytes, and no exception is thrown.
 */
function asText(bytes: Buffer): string | null {
  const n = bytes.length;
  if (n < 8) return null;
  for (let i = 0; i < n; ) {
    const b = bytes[i] as number;
    if (b < 0x80) {
      if ((b < 0x20 && b !== 9 && b !== 10 && b !== 13) || b === 0x7f) return null;
      i++;
      continue;
    }
    const len = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    if (len === 0 || i + len > n) return null;
    for (let k = 1; k < len; k++) if (((bytes[i + k] as number) & 0xc0) !== 0x80) return null;
    i += len;
  }
  return bytes.toString('utf8');
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
  [[0x30, 0x82], null], // DER: a certificate, a CSR or a public key (a private key's PEM header is a secret finding)
  [[0x30, 0x81], null],
  [[0xc2], null], // OpenPGP signature packet (new format)
  [[0xc6], null], // OpenPGP public key packet (new format)
  [[0x99], null], // OpenPGP public key packet (old format)
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

interface Span {
  index: number;
  end: number;
}

/** Whether text[from, to) is only `-` (tokens joined into one base64url run). */
function dashes(text: string, from: number, to: number): boolean {
  for (let k = from; k < to; k++) if (text.charCodeAt(k) !== 0x2d) return false;
  return true;
}

/** The separator between two spaced groups: one to three of ` .:,-` (`, `, ` - `). */
function spacedGap(text: string, from: number, to: number): boolean {
  if (to - from < 1 || to - from > 3) return false;
  for (let k = from; k < to; k++) {
    const c = text.charCodeAt(k);
    if (c !== 0x20 && c !== 0x2e && c !== 0x3a && c !== 0x2c && c !== 0x2d) return false;
  }
  return true;
}

const wholeLine = (text: string, s: Span) => (s.index === 0 || text.charCodeAt(s.index - 1) === 10) && (s.end === text.length || text.charCodeAt(s.end) === 10);

/**
 * One pass over the text's tokens, each character read once, finds two things: encoded runs
 * (tokens joined by `-`, at least MIN_BASE64 long; whole-line runs in a row are joined, as MIME
 * wraps base64 at 64 or 76 characters) and spaced runs (five or more groups of at most four
 * characters, one separator apart: `A K I A …`, `AKIA IOSF …`, `69 67 6e …`).
 */
function scanTokens(text: string): { runs: { index: number; run: string }[]; spaced: Span[] } {
  const encoded: Span[] = [];
  const spaced: Span[] = [];
  const n = text.length;
  // Plain numbers, no closures: this loop reads every character of every result.
  let runStart = -1;
  let runEnd = -1;
  let spStart = -1;
  let spEnd = -1;
  let groups = 0;
  let prevEnd = -1;
  let prevLen = 0;
  for (let i = 0; i <= n; ) {
    let j = i;
    if (i < n) {
      if (!isToken(text.charCodeAt(i))) {
        i++;
        continue;
      }
      j = i + 1;
      while (j < n && isToken(text.charCodeAt(j))) j++;
    }
    const len = j - i;
    const atEnd = i === n;
    if (!atEnd && runStart >= 0 && dashes(text, prevEnd, i)) runEnd = j;
    else {
      if (runStart >= 0) {
        const span = { index: runStart, end: runEnd };
        const last = encoded.at(-1);
        // A short run still counts as the last line of a wrapped block.
        if (runEnd - runStart >= MIN_BASE64 || (last && last.end + 1 === runStart && wholeLine(text, last) && wholeLine(text, span))) encoded.push(span);
      }
      runStart = i;
      runEnd = j;
    }
    if (!atEnd && spStart >= 0 && len <= 4 && prevLen <= 4 && spacedGap(text, prevEnd, i)) {
      spEnd = j;
      groups++;
    } else {
      if (spStart >= 0 && groups >= 5) spaced.push({ index: spStart, end: spEnd });
      spStart = len <= 4 ? i : -1;
      spEnd = j;
      groups = 1;
    }
    if (atEnd) break;
    prevEnd = j;
    prevLen = len;
    i = j;
  }
  const runs: { index: number; run: string }[] = [];
  for (let k = 0; k < encoded.length; k++) {
    const first = encoded[k] as Span;
    let body = text.slice(first.index, first.end);
    let last = first;
    for (let next = encoded[k + 1]; next && last.end + 1 === next.index && wholeLine(text, last) && wholeLine(text, next); next = encoded[k + 1]) {
      body += text.slice(next.index, next.end);
      last = next;
      k++;
    }
    if (body.length >= MIN_BASE64) runs.push({ index: first.index, run: body });
  }
  return { runs, spaced };
}

/** Base64 and hex runs: decoded text to scan again, and binary that is a payload. */
function decodeRuns(text: string, runs: { index: number; run: string }[], out: Decoded[], binary: BinaryRun[]): void {
  const lineAt = lineCounter(text);
  for (const { index, run } of runs) {
    // `key=value`: an `=` inside a run ends one value (padding is only at the end).
    const pieces = run.indexOf('=') < run.length - 3 && /=[^=]/.test(run) ? run.split(/=+(?=[^=])/) : [run];
    for (const piece of pieces) {
      const lead = piece.charCodeAt(0);
      const body = lead === 0x2d || lead === 0x5f ? piece.replace(/^[-_]+/, '') : piece;
      if (body.length < MIN_BASE64) continue;
      if (HEX_RUN.test(body)) {
        // Text in hex starts with 0 or 2-7 (ASCII) or c-f (a UTF-8 lead byte).
        const t = body.length >= MIN_HEX && body.length % 2 === 0 && /^[02-7c-f]/i.test(body) ? asText(Buffer.from(body, 'hex')) : null;
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

const SEPARATORS = /[ .:,-]+/;
const HEX_BYTE = /^(?:0x)?[0-9a-fA-F]{2}$/;
/** Single characters spaced apart (closed up into words, the rest of the line kept). */
const SPACED_CHARS = /(?<![\w+/=])(?:[\w+/=](?:[ .:,-]|, )){4,}[\w+/=](?![\w+/=])/g;
/** `\x69\x67…`: hex escapes, eight or more. */
const ESCAPED_HEX = /(?:\\x[0-9a-fA-F]{2}){8,}/g;
/** `&#105;`, `&#x69;`, `\u0069`, `\u{69}`: character escapes of HTML and of string literals. */
const CHAR_ESCAPE = /&#(?:x([0-9a-f]{1,6})|(\d{1,7}));|\\u(?:\{([0-9a-f]{1,6})\}|([0-9a-f]{4}))/gi;
/** Runs holding at least three %XX escapes. */
const PERCENT = /[^\s%]{0,64}(?:%[0-9A-Fa-f]{2}[^\s%]{0,64}){3,}/g;
/** A query-string value written with `+` for spaces (form encoding): `?q=ignore+previous+instructions`. */
const FORM_VALUE = /[?&][^\s=&#]{1,64}=([^\s&#]*\+[^\s&#]*)/g;
/**
 * Key prefixes (secrets.ts) at the start of a group, their own `-` possibly lost among the
 * separators (`glpa-t-hY-…`); `sk-` is left out (closing up `desk top` must not make one).
 */
const SECRET_START = /AKIA|ASIA|AIza|gh[pousr]_|github_pat_|glpat-?|xox[abposr]-?|[rs]k_live_|eyJ/g;

/** The spaced key a run of groups spells, from each group where a key prefix starts, in its canonical form. */
function closedUpKeys(groups: string[]): string[] {
  const joined = groups.join('');
  const starts = new Set<number>();
  for (let at = 0, k = 0; k < groups.length; at += (groups[k] as string).length, k++) starts.add(at);
  const keys: string[] = [];
  SECRET_START.lastIndex = 0;
  for (let m = SECRET_START.exec(joined); m !== null; m = SECRET_START.exec(joined)) {
    if (starts.has(m.index)) keys.push(joined.slice(m.index).replace(/^(glpat|xox[abposr])-?/, '$1-'));
  }
  return keys;
}
const rot13 = (s: string) => s.replace(/[A-Za-z]/g, (c) => String.fromCharCode(((c.charCodeAt(0) & 0x1f) + 12) % 26 + (c.charCodeAt(0) & 0xe0) + 1));
/** ROT13 of words injected text is made of ("ignore", "instructions", "sandbox", "curl", …) and of key prefixes. */
const ROT13_STEMS = new RegExp(
  `\\b(?:${['ignore', 'disregard', 'forget', 'instruction', 'previous', 'sandbox', 'disable', 'firewall', 'policy', 'allowlist', 'grant', 'access', 'network',
    'execute', 'download', 'upload', 'curl', 'wget', 'please', 'kindly', 'script', 'attached', 'system', 'prompt', 'developer', 'approve', 'admin',
    'password', 'token', 'secret'].map((w) => rot13(w)).join('|')}|NXVN|tuc_)`,
  'i',
);

function decodePercent(run: string): string {
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

/** Spaced groups: hex bytes decoded, spaced letters closed up (the whole line), a spaced key closed up. */
function decodeSpaced(view: string, spans: Span[], out: Decoded[]): void {
  const lineAt = lineCounter(view);
  let lastLine = -1;
  for (const sp of spans) {
    const line = lineAt(sp.index);
    const groups = view.slice(sp.index, sp.end).split(SEPARATORS);
    if (groups.length >= 8 && groups.every((g) => HEX_BYTE.test(g))) {
      const t = asText(Buffer.from(groups.map((g) => g.slice(-2)).join(''), 'hex'));
      if (t !== null) out.push({ line, text: t, via: 'hex' });
    } else if (groups.every((g) => g.length === 1)) {
      if (line !== lastLine) out.push({ line, text: spacedLine(view, sp.index), via: 'spaced-out' });
      lastLine = line;
    } else {
      for (const key of closedUpKeys(groups)) out.push({ line, text: key, via: 'spaced-out', secretsOnly: true });
    }
  }
}

/**
 * Every decodable run of the (normalised) text, and the binary payloads among them. Cheap tests
 * first: most output has no run that decodes to text, no `%`, no `\x` and no ROT13 stems.
 */
export function decodeAll(view: string): { decoded: Decoded[]; binary: BinaryRun[] } {
  const decoded: Decoded[] = [];
  const binary: BinaryRun[] = [];
  const { runs, spaced } = scanTokens(view);
  decodeRuns(view, runs, decoded, binary);
  if (view.includes('%')) {
    eachMatch(PERCENT, view, (m, line) => {
      const t = decodePercent(m[0]);
      if (t !== m[0]) decoded.push({ line, text: t, via: 'percent-encoded' });
    });
  }
  if (view.includes('&#') || view.includes('\\u')) decodeEscapedLines(view, decoded);
  if (view.includes('+')) {
    eachMatch(FORM_VALUE, view, (m, line) => decoded.push({ line, text: decodePercent(m[1] as string), via: 'percent-encoded' }));
  }
  if (view.includes('\\x')) {
    eachMatch(ESCAPED_HEX, view, (m, line) => {
      const t = asText(Buffer.from(m[0].replace(/\\x/g, ''), 'hex'));
      if (t !== null) decoded.push({ line, text: t, via: 'hex' });
    });
  }
  decodeSpaced(view, spaced, decoded);
  if (ROT13_STEMS.test(view)) {
    view.split('\n').forEach((l, i) => {
      if (ROT13_STEMS.test(l)) decoded.push({ line: i, text: rot13(l), via: 'ROT13' });
    });
  }
  return { decoded, binary };
}

/** Lines with three or more character escapes, unescaped (the rest of the line kept). */
function decodeEscapedLines(view: string, out: Decoded[]): void {
  view.split('\n').forEach((l, i) => {
    if (!(l.includes('&#') || l.includes('\\u'))) return;
    let n = 0;
    const t = l.replace(CHAR_ESCAPE, (_, x?: string, d?: string, b?: string, u?: string) => {
      const cp = parseInt(x ?? b ?? u ?? d ?? '', x !== undefined || b !== undefined || u !== undefined ? 16 : 10);
      n++;
      return cp <= 0x10ffff ? String.fromCodePoint(cp) : '';
    });
    if (n >= 3) out.push({ line: i, text: t, via: 'escaped' });
  });
}

/** The line holding `index`, with every run of spaced single characters closed up into a word. */
function spacedLine(view: string, index: number): string {
  const start = view.lastIndexOf('\n', index) + 1;
  const end = view.indexOf('\n', index);
  const line = view.slice(start, end === -1 ? view.length : end);
  return line.replace(SPACED_CHARS, (s) => s.replace(/[ .:,-]/g, ''));
}
