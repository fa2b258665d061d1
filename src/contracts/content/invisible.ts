/**
 * Invisible and format characters: what hides text from a person (or splits a word past a
 * pattern) while a model still reads it. Used three ways, always with the same predicate:
 * findings (`findInvisible`), the normalised view (removed), and the host's writer (escaped).
 *
 * Always a finding: C0/C1 controls except tab and newline (optional, see `controls`), bidi
 * embeddings, overrides and isolates, Unicode TAG characters outside an emoji flag sequence, a BOM
 * or invisible operator inside the text. Depending on context (`soft`): zero-width space, joiners,
 * direction marks, variation selectors, soft hyphen, fillers, other format characters — fine inside
 * non-Latin words and emoji (ZWNJ in Persian, ZWJ in a family emoji, VS16 in ❤️, an ideographic
 * variation selector after a kanji), a finding next to ASCII, where they split a token or a key.
 */

// eslint-disable-next-line no-control-regex, no-misleading-character-class -- controls and lone combining selectors are exactly what is looked for
const CANDIDATES_G = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\p{Cf}\u{e0100}-\u{e01ef}]/gu;

const isTag = (c: number) => c >= 0xe0000 && c <= 0xe007f;
const isAscii = (c: number) => c < 0x80;
const EMOJI = /\p{Extended_Pictographic}|\p{Emoji_Modifier}/u;
const EMOJI_PROP = /\p{Emoji}/u;
const WHITESPACE = /\s/u;

export const CONTROL_KIND = 'control character';

/** What kind of invisible character `c` is, or null when it is fine where it stands. */
function judge(text: string, at: number, c: number): string | null {
  if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) return CONTROL_KIND;
  if ((c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069)) return 'bidirectional override';
  if (c === 0xfeff || (c >= 0x2061 && c <= 0x2064) || (c >= 0xfff9 && c <= 0xfffb)) return 'invisible format character';
  if (isTag(c)) return isFlagTag(text, at) ? null : 'Unicode tag character';
  const prev = text.codePointAt(before(text, at)) ?? 0x20;
  const nextAt = at + (c > 0xffff ? 2 : 1);
  const next = text.codePointAt(nextAt) ?? 0x20;
  if (c === 0x200d && EMOJI.test(String.fromCodePoint(prev)) && EMOJI.test(String.fromCodePoint(next))) return null;
  if (c === 0xfe0f || c === 0xfe0e) {
    // Emoji presentation: ❤️, ©️, and a keycap 1️⃣ (an ASCII digit, then U+20E3).
    if (isAscii(prev)) return next === 0x20e3 ? null : 'variation selector';
    if (EMOJI_PROP.test(String.fromCodePoint(prev))) return null;
  }
  // Inside a non-Latin word (both sides non-ASCII, not spaces) a joiner or selector is writing, not hiding.
  const inWord = (x: number) => !isAscii(x) && !WHITESPACE.test(String.fromCodePoint(x));
  if (inWord(prev) && inWord(next)) return null;
  if (c >= 0xfe00 && c <= 0xfe0f) return 'variation selector';
  if (c >= 0xe0100) return 'variation selector';
  return 'zero-width or invisible character';
}

/** Index of the code point before `at` (a surrogate pair counts as one). */
function before(text: string, at: number): number {
  const lo = text.charCodeAt(at - 1);
  return lo >= 0xdc00 && lo <= 0xdfff && at >= 2 ? at - 2 : at - 1;
}

/** A tag character inside an emoji flag sequence: 🏴 + tag letters + CANCEL TAG (🏴󠁧󠁢󠁳󠁣󠁴󠁿). */
function isFlagTag(text: string, at: number): boolean {
  let start = at;
  while (start >= 2 && isTag(text.codePointAt(start - 2) ?? 0)) start -= 2;
  let end = at;
  while (isTag(text.codePointAt(end) ?? 0)) end += 2;
  return text.codePointAt(start - 2) === 0x1f3f4 && text.codePointAt(end - 2) === 0xe007f && end - start >= 4 && end - start <= 16;
}

export interface InvisibleHit {
  /** UTF-16 index in the text. */
  index: number;
  codePoint: number;
  kind: string;
}

/** Every invisible character that is not fine where it stands, in text order (at most `max`). */
export function findInvisible(text: string, max = Infinity): InvisibleHit[] {
  if (text.search(CANDIDATES_G) === -1) return []; // search() ignores and keeps lastIndex
  const hits: InvisibleHit[] = [];
  CANDIDATES_G.lastIndex = 0;
  for (let m = CANDIDATES_G.exec(text); m !== null && hits.length < max; m = CANDIDATES_G.exec(text)) {
    const c = m[0].codePointAt(0) as number;
    if (c === 0x0a || c === 0x09) continue;
    const kind = judge(text, m.index, c);
    if (kind !== null) hits.push({ index: m.index, codePoint: c, kind });
  }
  return hits;
}

/** `\x1b`, `\u200b`, `\u{e0041}`: the visible spelling of a character. */
const escapeChar = (c: number): string =>
  c < 0x100 ? `\\x${c.toString(16).padStart(2, '0')}` : c <= 0xffff ? `\\u${c.toString(16).padStart(4, '0')}` : `\\u{${c.toString(16)}}`;

/**
 * Makes every character `findInvisible` would report visible as escape text (tabs stay; so do a
 * ZWJ inside an emoji and the rest that is fine where it stands). The host writes program output
 * this way, so its own results never hide text.
 */
export function escapeInvisible(text: string): string {
  const hits = findInvisible(text);
  if (hits.length === 0) return text;
  let out = '';
  let from = 0;
  for (const h of hits) {
    out += text.slice(from, h.index) + escapeChar(h.codePoint);
    from = h.index + (h.codePoint > 0xffff ? 2 : 1);
  }
  return out + text.slice(from);
}

/** The ASCII text a run of TAG characters spells (U+E0020..U+E007E map to ' '..'~'). */
export function decodeTags(text: string): { index: number; text: string }[] {
  const out: { index: number; text: string }[] = [];
  const re = /[\u{e0020}-\u{e007e}]+/gu;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    let s = '';
    for (const ch of m[0]) s += String.fromCharCode((ch.codePointAt(0) as number) - 0xe0000);
    if (s.length >= 4) out.push({ index: m.index, text: s });
  }
  return out;
}

/**
 * Text between a right-to-left override (U+202E) and its end, in the order a person sees it:
 * `\u202esnoitcurtsni erongi` shows as "ignore instructions" while the characters run backwards.
 */
export function decodeReversed(text: string): { index: number; text: string }[] {
  const out: { index: number; text: string }[] = [];
  const re = /\u202e([^\u202a-\u202e\u2066-\u2069\n]{4,})/g;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) out.push({ index: m.index, text: [...(m[1] as string)].reverse().join('') });
  return out;
}
