import type { Problem } from '../base/problem.js';
import { shellWords, type ShellOperatorKind } from './shell-words.js';
import { findInstall } from './tool-request-content.js';
import { trProblem, type ToolRequestCode } from './tool-request-rules.js';
import type { Language, ToolCommand, ToolInput } from './tool-request-schema.js';

/**
 * The `## Command` rules (backend ns). The line is read as POSIX shell words (shell-words.ts);
 * Airlock execs the resulting argv with the working directory /in, so every piece of shell syntax
 * a shell would have acted on is rejected, and the argv itself must be `<interpreter> <declared
 * script> [args]`. docs/tool-request.md explains the rules to request authors.
 */

/** How each operator kind is reported. */
const OPERATOR_CODE: Record<ShellOperatorKind, ToolRequestCode> = {
  sequence: 'TR_COMMAND_CHAINING',
  and: 'TR_COMMAND_CHAINING',
  or: 'TR_COMMAND_CHAINING',
  pipe: 'TR_COMMAND_PIPE',
  background: 'TR_COMMAND_BACKGROUND',
  redirect: 'TR_COMMAND_REDIRECT',
  heredoc: 'TR_COMMAND_HEREDOC',
  subshell: 'TR_COMMAND_SYNTAX',
  'command-substitution': 'TR_COMMAND_SUBSTITUTION',
  backtick: 'TR_COMMAND_SUBSTITUTION',
  parameter: 'TR_COMMAND_EXPANSION',
  tilde: 'TR_COMMAND_EXPANSION',
  glob: 'TR_COMMAND_GLOB',
  brace: 'TR_COMMAND_GLOB',
  comment: 'TR_COMMAND_SYNTAX',
};

const OPERATOR_WHY: Record<ShellOperatorKind, string> = {
  sequence: 'runs a second command',
  and: 'chains a second command',
  or: 'chains a second command',
  pipe: 'pipes into a second command',
  background: 'starts a background process',
  redirect: 'is a redirection',
  heredoc: 'starts a heredoc',
  subshell: 'is shell grouping syntax',
  'command-substitution': 'is a command substitution',
  backtick: 'is a command substitution',
  parameter: 'is a shell expansion, and no shell or environment expands it',
  tilde: 'expands to a home directory in a shell',
  glob: 'is a glob pattern no shell will expand',
  brace: 'is a brace pattern no shell will expand',
  comment: 'starts a shell comment that hides the rest of the line',
};

/** At most this many problems per code from one line: a hostile line cannot flood the report. */
const MAX_PER_CODE = 3;

const SHELLS = new Set(['sh', 'bash', 'zsh', 'dash', 'ksh', 'mksh', 'fish', 'csh', 'tcsh', 'ash', 'busybox', 'pwsh', 'powershell', 'cmd', 'cmd.exe', 'rbash', 'yash']);
// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
const BAD_CHARS = /[\u0000-\u0008\u000b-\u001f\u007f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/;
const URL_SCHEME = /^([a-z][a-z0-9+.-]*):\/\//i;

interface InterpreterSpec {
  names: RegExp;
  display: string;
  /** A subcommand that must follow the interpreter (`go run`). */
  sub?: string;
  exts: readonly string[];
  /** Short option letters whose presence means inline code (or python's -m module). */
  inlineShort: string;
  inlineLong: readonly string[];
  /** Short option letters that take a value (attached or as the next word). */
  valueShort: string;
  valueLong: readonly string[];
}

const PYTHON: InterpreterSpec = {
  names: /^python(?:3(?:\.\d{1,2})?)?$/,
  display: '`python`, `python3` or `python3.N`',
  exts: ['.py'],
  inlineShort: 'cm',
  inlineLong: [],
  valueShort: 'WX',
  valueLong: ['--check-hash-based-pycs'],
};
const NODE_BASE = {
  names: /^node$/,
  inlineShort: 'ep',
  inlineLong: ['--eval', '--print'],
  valueShort: 'rC',
  valueLong: ['--require', '--import', '--loader', '--experimental-loader', '--conditions', '--input-type', '--env-file', '--title'],
};
/** The interpreter mapping documented in docs/tool-request.md. */
export const INTERPRETERS: Record<Language, InterpreterSpec> = {
  python: PYTHON,
  node: { ...NODE_BASE, display: '`node` with a .js, .mjs or .cjs script', exts: ['.js', '.mjs', '.cjs'] },
  ts: { ...NODE_BASE, display: '`node` with a .ts, .mts or .cts script (type stripping)', exts: ['.ts', '.mts', '.cts'] },
  go: { names: /^go$/, display: '`go run` with a .go file', sub: 'run', exts: ['.go'], inlineShort: '', inlineLong: [], valueShort: '', valueLong: [] },
  ruby: { names: /^ruby$/, display: '`ruby` with a .rb script', exts: ['.rb'], inlineShort: 'e', inlineLong: [], valueShort: 'IrECF', valueLong: [] },
};

const endsWithAny = (s: string, exts: readonly string[]): boolean => exts.some((e) => s.endsWith(e));

/** `piece.split('/').includes('..')` without the array. */
const hasDotDotSegment = (piece: string): boolean =>
  piece === '..' || piece.startsWith('../') || piece.endsWith('/..') || piece.includes('/../');

/** The absolute-path candidates and `..` findings of one argument. */
function scanArgument(word: string): { abs: string[]; traversal: boolean; fileUrl: boolean } {
  const abs: string[] = [];
  let traversal = false;
  let fileUrl = false;
  // `--opt=/p`, `a,/p`, `x:/p` and `-I/p` all name /p; URLs (other than file://) are not paths.
  // Speed: split only when the separator occurs (most words have none).
  const parts = word.includes('=') || word.includes(',') ? word.split(/[=,]/) : [word];
  for (const part of parts) {
    const hasColon = part.includes(':');
    const scheme = hasColon ? URL_SCHEME.exec(part) : null; // a scheme needs `:`
    if (scheme) {
      if (scheme[1]!.toLowerCase() === 'file') fileUrl = true;
      continue;
    }
    for (const piece of hasColon ? part.split(':') : [part]) {
      if (hasDotDotSegment(piece)) traversal = true;
      if (piece.startsWith('/')) abs.push(piece);
      else if (piece.startsWith('-') && piece.includes('/')) {
        const short = /^-[A-Za-z]+(\/.*)$/.exec(piece);
        if (short) abs.push(short[1]!);
      }
    }
  }
  return { abs, traversal, fileUrl };
}

/**
 * Checks the `## Command` body lines. `language` and `inputs` are undefined when the front matter
 * did not give them validly; the checks that need them are then skipped.
 */
export function checkCommand(
  body: { text: string; line: number }[],
  headingLine: number,
  language: Language | undefined,
  inputs: ToolInput[] | undefined,
  problems: Problem[],
): ToolCommand | null {
  if (body.length === 0) {
    problems.push(trProblem('TR_COMMAND_EMPTY', '`## Command` is empty; write one command line such as `python3 script.py --in /in/input.csv`', headingLine));
    return null;
  }
  const fence = body.find((l) => /^\s*(```|~~~)/.test(l.text));
  if (fence) {
    problems.push(trProblem('TR_COMMAND_FENCE', 'the command must be plain text, not inside a code fence; remove the ``` lines', fence.line));
    return null;
  }
  if (body.length > 1) {
    problems.push(trProblem('TR_COMMAND_MULTILINE', `\`## Command\` has ${body.length} lines; it must hold exactly one command line`, body[1]!.line));
    return null;
  }
  const { text, line } = body[0]!;
  const raw = text.trim();
  if (raw.length >= 2 && raw.startsWith('`') && raw.endsWith('`')) {
    problems.push(trProblem('TR_COMMAND_FENCE', 'the command is wrapped in inline-code backticks, which a shell reads as command substitution; write the bare command line', line));
    return null;
  }
  const start = problems.length;
  const bad = BAD_CHARS.exec(raw);
  if (bad) {
    problems.push(trProblem('TR_COMMAND_SYNTAX', `column ${bad.index + 1}: invisible, control or bidi character U+${bad[0].charCodeAt(0).toString(16).padStart(4, '0').toUpperCase()}; retype the line in plain text`, line));
  }

  const { words, operators, error } = shellWords(raw);
  const perCode = new Map<ToolRequestCode, number>();
  for (const op of operators) {
    const code = OPERATOR_CODE[op.kind];
    const count = perCode.get(code) ?? 0;
    perCode.set(code, count + 1);
    if (count >= MAX_PER_CODE) continue;
    const text = op.kind === 'comment' ? '#' : op.text.length > 20 ? `${op.text.slice(0, 20)}…` : op.text;
    const shown = op.kind === 'backtick' ? 'backtick' : `\`${text}\``;
    const where = op.quoted ? 'inside double quotes ' : 'unquoted ';
    const hint =
      op.quoted
        ? 'double quotes do not stop a shell from expanding it; use single quotes if it is literal text'
        : "quote it ('...') if it is part of an argument";
    problems.push(trProblem(code, `column ${op.column}: ${where}${shown} ${OPERATOR_WHY[op.kind]}; Airlock runs exactly one program without a shell (${hint})`, line));
  }
  if (error) {
    const what = error.kind === 'trailing-backslash' ? 'a trailing backslash escapes nothing' : `the ${error.kind === 'unterminated-single-quote' ? 'single' : 'double'} quote opened here is never closed`;
    problems.push(trProblem('TR_COMMAND_SYNTAX', `column ${error.column}: ${what}; there is no shell to continue the line, so the command is refused`, line));
  }

  const argv = words.map((w) => w.value);
  const declared = inputs ? new Set(inputs.map((i) => i.name)) : undefined;

  // Paths in every argument (argv[0] is judged by the interpreter rule).
  for (let k = 1; k < words.length; k++) {
    const w = words[k]!;
    const { abs, traversal, fileUrl } = scanArgument(w.value);
    if (!traversal && !fileUrl && abs.length === 0) continue; // nothing to report: skip building `at`
    const at = (): string => `column ${w.column}: argument ${JSON.stringify(w.value.length > 60 ? `${w.value.slice(0, 60)}…` : w.value)}`;
    if (traversal) problems.push(trProblem('TR_PATH_TRAVERSAL', `${at()} has a \`..\` segment; use /in/<name> or /out/<path> directly`, line));
    if (fileUrl) problems.push(trProblem('TR_HOST_PATH', `${at()} is a file:// URL of the host; declare the file as an input`, line));
    for (const p of abs) {
      if (p === '/dev' || p.startsWith('/dev/')) problems.push(trProblem('TR_DEVICE', `${at()} names a device path (${p}); devices are not available in the sandbox`, line));
      else if (p === '/in' || p === '/in/' || p === '/out' || p === '/out/' || p.startsWith('/out/')) continue;
      else if (p.startsWith('/in/')) {
        const name = p.slice(4);
        if (declared && !declared.has(name) && !traversal) {
          problems.push(trProblem('TR_INPUT_UNDECLARED', `${at()} reads ${p}, which is not a declared input; declare it with its sha256`, line));
        }
      } else if (!traversal) problems.push(trProblem('TR_HOST_PATH', `${at()} names the host path ${p}; only /in/... and /out/... exist for the program`, line));
    }
  }

  // Quoting can split an installer invocation the document-wide scan reads as text ('pip'" "install).
  // Words that rejoin to the raw line cannot pass the second test below: skip both scans.
  const joined = argv.join(' ');
  const install = joined === raw ? undefined : findInstall(joined);
  if (install !== undefined && findInstall(raw) === undefined) {
    problems.push(trProblem('TR_PACKAGE_INSTALL', `the command's words form \`${install.slice(0, 40)}\`, a package install; requests never install packages`, line));
  }

  if (argv.length === 0) {
    if (problems.length === start) problems.push(trProblem('TR_COMMAND_EMPTY', 'the command line has no words', line));
    return null;
  }
  const clean = problems.length === start;
  const interp = argv[0]!;
  const base = interp.slice(interp.lastIndexOf('/') + 1);
  if (SHELLS.has(base)) {
    problems.push(trProblem('TR_COMMAND_SHELL', `the program is the shell \`${base}\`; run the interpreter of the declared language on a declared script instead`, line));
    return null;
  }
  if (language === undefined) return null;
  const spec = INTERPRETERS[language];
  if (!spec.names.test(interp)) {
    const why = interp.includes('/') ? 'give the interpreter as a bare name, the sandbox resolves it' : `language ${language} runs ${spec.display}`;
    problems.push(trProblem('TR_INTERPRETER', `the command starts with \`${interp.length > 40 ? `${interp.slice(0, 40)}…` : interp}\`; ${why}`, line));
    return null;
  }
  let i = 1;
  if (spec.sub !== undefined) {
    if (argv[1] !== spec.sub) {
      problems.push(trProblem('TR_INTERPRETER', `language ${language} runs ${spec.display}: the second word must be \`${spec.sub}\``, line));
      return null;
    }
    i = 2;
  }

  // Interpreter options up to the script: inline code is refused, option values are skipped.
  let script: string | undefined;
  for (; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--') {
      script = argv[i + 1];
      break;
    }
    if (a === '-' || !a.startsWith('-')) {
      script = a;
      break;
    }
    if (a.startsWith('--')) {
      const name = a.split('=', 1)[0]!;
      if (spec.inlineLong.includes(name)) {
        problems.push(trProblem('TR_INLINE_CODE', `\`${name}\` runs inline code that is not a declared input; save it as a script and declare it`, line));
        return null;
      }
      if (spec.valueLong.includes(name) && !a.includes('=')) i++;
      continue;
    }
    if (spec.sub !== undefined) continue; // go flags: single dash, values attached with =
    for (let k = 1; k < a.length; k++) {
      const letter = a[k]!;
      if (spec.inlineShort.includes(letter)) {
        const what = letter === 'm' && spec === PYTHON ? 'runs a module instead of a declared script' : 'runs inline code that is not a declared input';
        problems.push(trProblem('TR_INLINE_CODE', `\`-${letter}\` ${what}; save the code as a script, declare it with its sha256 and run it by name`, line));
        return null;
      }
      if (spec.valueShort.includes(letter)) {
        if (k === a.length - 1) i++; // the value is the next word
        break;
      }
    }
  }
  if (script === undefined) {
    problems.push(trProblem('TR_SCRIPT_NOT_INPUT', `the command gives ${interp} no script; name a declared input such as script${spec.exts[0]}`, line));
    return null;
  }
  if (!endsWithAny(script, spec.exts)) {
    const hint = spec.sub !== undefined ? ' (write go flags as -flag=value)' : '';
    problems.push(trProblem('TR_INTERPRETER', `the script ${JSON.stringify(script)} is not a ${spec.exts.join('/')} file; language ${language} runs ${spec.display}${hint}`, line));
    return null;
  }
  // The working directory is /in: `script.py`, `./script.py` and `/in/script.py` are the same file.
  const name = script.startsWith('/in/') ? script.slice(4) : script.startsWith('./') ? script.slice(2) : script;
  if (declared && (name.includes('/') || !declared.has(name))) {
    problems.push(trProblem('TR_SCRIPT_NOT_INPUT', `the script ${JSON.stringify(script)} is not a declared input; declare it under inputs with its sha256 (relative names are read from /in)`, line));
    return null;
  }
  if (spec.sub !== undefined && declared) {
    // `go run a.go b.go`: every further .go file right after the first is compiled too.
    for (let k = i + 1; k < argv.length && argv[k]!.endsWith('.go'); k++) {
      const extra = argv[k]!;
      const n = extra.startsWith('/in/') ? extra.slice(4) : extra.startsWith('./') ? extra.slice(2) : extra;
      if (n.includes('/') || !declared.has(n)) {
        problems.push(trProblem('TR_SCRIPT_NOT_INPUT', `the Go file ${JSON.stringify(extra)} is not a declared input`, line));
        return null;
      }
    }
  }
  if (!clean || !declared) return null;
  return { raw, argv, interpreter: interp, script: `/in/${name}` };
}
