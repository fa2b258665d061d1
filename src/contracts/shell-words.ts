/**
 * A POSIX shell-word tokenizer for ONE command line (XCU 2.2 quoting, 2.3 token recognition).
 *
 * Airlock never hands a command to a shell: it execs the argv. So this module answers two
 * questions about a line a person wrote in shell notation:
 *   1. which argv a POSIX shell would build from it after quote removal (`words`), and
 *   2. which parts a shell would have treated as syntax rather than data (`operators`): control
 *      operators, redirections, heredocs, substitutions, expansions, globs, comments.
 * The caller decides what to reject; a quoted metacharacter is data (`"a;b"` is the word a;b).
 *
 * Quoting implemented:
 *   - backslash outside quotes escapes the next character; backslash-newline is removed;
 *   - single quotes: everything literal up to the next `'`;
 *   - double quotes: backslash escapes only $ ` " \ and newline (else it stays literal);
 *     `$` and backticks inside double quotes are still expansions in POSIX, so they are reported
 *     (with `quoted: true`) and kept literally in the word.
 * Errors (unterminated quote, trailing backslash) stop tokenizing: the line has no argv.
 * Columns are 1-based UTF-16 offsets into the line. Linear time, never throws.
 */

export type ShellOperatorKind =
  | 'sequence' // ; ;; ;& and newline: a second command follows
  | 'and' // &&
  | 'or' // ||
  | 'pipe' // | |&
  | 'background' // &
  | 'redirect' // < > >> <> >| <& >& &> &>> (with an optional io number such as 2>)
  | 'heredoc' // << <<- <<<
  | 'subshell' // ( )
  | 'command-substitution' // $( and $((
  | 'backtick' // `
  | 'parameter' // $NAME ${...} $1 $@ ... and bash's $'..' / $".."
  | 'glob' // * ? [
  | 'brace' // { } (bash brace expansion, POSIX reserved words)
  | 'tilde' // ~ at the start of a word or after = or :
  | 'comment'; // # at the start of a word: the rest of the line is ignored by a shell

export interface ShellOperator {
  kind: ShellOperatorKind;
  /** The operator as written (for a comment: the whole rest of the line). */
  text: string;
  column: number;
  /** True when met inside double quotes (where POSIX still expands `$` and backticks). */
  quoted: boolean;
}

export interface ShellWord {
  /** The argument after quote removal. */
  value: string;
  column: number;
  /** True when any quoting or escaping was used inside the word. */
  quoted: boolean;
}

export interface ShellSyntaxError {
  kind: 'unterminated-single-quote' | 'unterminated-double-quote' | 'trailing-backslash';
  column: number;
}

export interface ShellWordsResult {
  words: ShellWord[];
  operators: ShellOperator[];
  error: ShellSyntaxError | null;
}

const NAME_START = /[A-Za-z_]/;
const NAME_REST = /[A-Za-z0-9_]/;
const SPECIAL_PARAM = /[0-9@*#?$!-]/;

/** Splits a command line into POSIX shell words and reports the shell syntax it met. */
export function shellWords(line: string): ShellWordsResult {
  const words: ShellWord[] = [];
  const operators: ShellOperator[] = [];
  let error: ShellSyntaxError | null = null;
  let inWord = false; // a word is being built (an empty quoted word '' is still a word)
  let cur = '';
  let curStart = 0;
  let curQuoted = false;
  const n = line.length;
  let i = 0;

  const start = (at: number): void => {
    if (!inWord) {
      inWord = true;
      cur = '';
      curStart = at;
      curQuoted = false;
    }
  };
  const flush = (): void => {
    if (inWord) words.push({ value: cur, column: curStart + 1, quoted: curQuoted });
    inWord = false;
  };
  const op = (kind: ShellOperatorKind, text: string, at: number, quoted = false): void => {
    operators.push({ kind, text, column: at + 1, quoted });
  };
  /** At a `$`: the length of the expansion it starts (0 when the `$` is a literal character). */
  const dollar = (at: number, quoted: boolean): number => {
    const next = line[at + 1] ?? '';
    if (next === '(') {
      const text = line[at + 2] === '(' ? '$((' : '$(';
      op('command-substitution', text, at, quoted);
      return text.length;
    }
    if (next === '{') {
      const close = line.indexOf('}', at + 2);
      const text = close < 0 ? line.slice(at) : line.slice(at, close + 1);
      op('parameter', text, at, quoted);
      return text.length;
    }
    if (NAME_START.test(next)) {
      let j = at + 2;
      while (j < n && NAME_REST.test(line[j] as string)) j++;
      op('parameter', line.slice(at, j), at, quoted);
      return j - at;
    }
    if (SPECIAL_PARAM.test(next) || (!quoted && (next === "'" || next === '"'))) {
      op('parameter', line.slice(at, at + 2), at, quoted);
      // $'..' and $"..": report the `$` only; the quote itself is then read as a normal quote.
      return next === "'" || next === '"' ? 1 : 2;
    }
    return 0;
  };

  outer: while (i < n) {
    const c = line[i] as string;
    switch (c) {
      case ' ':
      case '\t':
        flush();
        i++;
        continue;
      case '\n':
        flush();
        op('sequence', '\n', i);
        i++;
        continue;
      case '\\': {
        if (i + 1 >= n) {
          error = { kind: 'trailing-backslash', column: i + 1 };
          break outer;
        }
        if (line[i + 1] === '\n') {
          i += 2; // line continuation: removed entirely
          continue;
        }
        start(i);
        cur += line[i + 1] as string;
        curQuoted = true;
        i += 2;
        continue;
      }
      case "'": {
        start(i);
        curQuoted = true;
        const close = line.indexOf("'", i + 1);
        if (close < 0) {
          error = { kind: 'unterminated-single-quote', column: i + 1 };
          break outer;
        }
        cur += line.slice(i + 1, close);
        i = close + 1;
        continue;
      }
      case '"': {
        start(i);
        curQuoted = true;
        const open = i;
        i++;
        let buf = '';
        for (;;) {
          if (i >= n) {
            error = { kind: 'unterminated-double-quote', column: open + 1 };
            break outer;
          }
          const d = line[i] as string;
          if (d === '"') {
            i++;
            break;
          }
          if (d === '\\') {
            const e = line[i + 1];
            if (e === '$' || e === '`' || e === '"' || e === '\\') {
              buf += e;
              i += 2;
            } else if (e === '\n') {
              i += 2;
            } else {
              buf += '\\';
              i++;
            }
            continue;
          }
          if (d === '$') {
            const len = dollar(i, true);
            if (len > 0) {
              buf += line.slice(i, i + len);
              i += len;
              continue;
            }
          } else if (d === '`') {
            op('backtick', '`', i, true);
          }
          buf += d;
          i++;
        }
        cur += buf;
        continue;
      }
      case '$': {
        start(i);
        const len = dollar(i, false) || 1;
        cur += line.slice(i, i + len);
        i += len;
        continue;
      }
      case '`':
        op('backtick', '`', i);
        start(i);
        cur += c;
        i++;
        continue;
      case '<':
      case '>': {
        // An all-digit unquoted word right before the operator is its io number (2>&1).
        let at = i;
        let prefix = '';
        if (inWord && !curQuoted && /^\d+$/.test(cur)) {
          prefix = cur;
          at = curStart;
          inWord = false;
        } else flush();
        const three = line.slice(i, i + 3);
        const two = line.slice(i, i + 2);
        if (three === '<<<' || three === '<<-') op('heredoc', prefix + three, at);
        else if (two === '<<') op('heredoc', prefix + two, at);
        else if (['<>', '<&', '>>', '>&', '>|'].includes(two)) op('redirect', prefix + two, at);
        else op('redirect', prefix + c, at);
        const len = three === '<<<' || three === '<<-' ? 3 : ['<<', '<>', '<&', '>>', '>&', '>|'].includes(two) ? 2 : 1;
        i += len;
        continue;
      }
      case '&': {
        flush();
        const three = line.slice(i, i + 3);
        const two = line.slice(i, i + 2);
        if (three === '&>>') op('redirect', three, i);
        else if (two === '&>') op('redirect', two, i);
        else if (two === '&&') op('and', two, i);
        else op('background', c, i);
        i += three === '&>>' ? 3 : two === '&>' || two === '&&' ? 2 : 1;
        continue;
      }
      case '|': {
        flush();
        const two = line.slice(i, i + 2);
        if (two === '||') op('or', two, i);
        else op('pipe', two === '|&' ? two : c, i);
        i += two === '||' || two === '|&' ? 2 : 1;
        continue;
      }
      case ';': {
        flush();
        const two = line.slice(i, i + 2);
        const text = two === ';;' || two === ';&' ? two : c;
        op('sequence', text, i);
        i += text.length;
        continue;
      }
      case '(':
      case ')':
        flush();
        op('subshell', c, i);
        i++;
        continue;
      case '#':
        if (!inWord) {
          op('comment', line.slice(i), i);
          break outer;
        }
        cur += c;
        i++;
        continue;
      case '~':
        if (!inWord || (!curQuoted && /[=:]$/.test(cur))) op('tilde', c, i);
        start(i);
        cur += c;
        i++;
        continue;
      case '*':
      case '?':
      case '[':
        op('glob', c, i);
        start(i);
        cur += c;
        i++;
        continue;
      case '{':
      case '}':
        op('brace', c, i);
        start(i);
        cur += c;
        i++;
        continue;
      default:
        start(i);
        cur += c;
        i++;
    }
  }
  if (error === null) flush();
  return { words, operators, error };
}
