/**
 * The normalised view every detector reads: what a model would understand, with the disguises a
 * person would not see taken off. Same number of lines as the input (no newline is added or
 * removed), so a finding's line number is the original's.
 *
 * 1. terminal escape sequences removed, raw (ESC [ … m) or as the host writes them (`\x1b[31m`);
 * 2. invisible and format characters removed (zero-width, joiners, variation selectors, TAG
 *    characters, bidi controls, controls other than tab and newline, U+FFFD);
 * 3. NFKC: fullwidth `ｉｇｎｏｒｅ`, `＜｜im_start｜＞`, mathematical 𝐛𝐨𝐥𝐝, circled ⓘ, ligatures -> ASCII;
 * 4. every other space (no-break, en/em, ideographic, line/paragraph separators, fillers, braille
 *    blank) -> a plain space.
 * Plain printable ASCII without escape text is returned as is (the common case costs one regex test).
 */

/** Anything but printable ASCII, tab and newline: the text may hide something (most output has none). */
export const NOT_PLAIN = /[^\t\n\x20-\x7e]/;
/** A terminal escape sequence as the host writes it into a document (`\x1b[31m`). */
export const ESCAPED_ANSI = /\\(?:x1b|u001b|033|e)[[\]]/;
// eslint-disable-next-line no-control-regex -- ANSI CSI/OSC sequences, raw and as escaped text
const ANSI = /(?:\u001b|\\x1b|\\u001b|\\033|\\e)(?:\[[0-?]{0,32}[ -/]{0,4}[@-~]|\][^\u0007\u001b\n]{0,256}(?:\u0007|\u001b\\|\\x07|\\a)?)/g;
// eslint-disable-next-line no-control-regex, no-misleading-character-class -- removed: hidden or meaningless in reading (lone combining selectors included)
const REMOVE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u034f\u061c\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufe00-\ufe0f\ufeff\ufff9-\ufffd\p{Cf}\u{e0000}-\u{e01ef}]/gu;
/** Spaces that are not U+0020 (tab included), and blank-looking letters. */
const SPACES = /[\t\p{Zs}\u2028\u2029\u115f\u1160\u2800\u3164\uffa0]/gu;

/** `plain`: the caller already knows whether NOT_PLAIN matches (it scans the text once). */
export function normalisedView(text: string, plain = !NOT_PLAIN.test(text)): string {
  if (plain && !(text.includes('\\') && ESCAPED_ANSI.test(text))) return text;
  return text.replace(ANSI, '').replace(REMOVE, '').normalize('NFKC').replace(SPACES, ' ');
}
