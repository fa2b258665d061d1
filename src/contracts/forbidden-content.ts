/**
 * Detectors for forbidden content in untrusted text (Tool Result spec, "Forbidden Content"):
 * embedded secrets, inline executable payloads, claims that policy should change, and new
 * instructions to fetch or execute; and the characters that hide text. Program output is the main
 * carrier of prompt injection, so these run over every line of a result, stream excerpts included.
 * This is the one module every door uses: the Tool Result contract, runAction's screen of a run's
 * output (the gate, `airlock run`), the UTP service (`screenContent`).
 *
 * Design (docs/forbidden-content.md says precisely what each detector catches and misses):
 * - The detectors read a normalised view (content/normalise.ts: NFKC, invisible characters
 *   removed, spaces folded), and again every encoded run decoded (content/decode.ts: base64, hex,
 *   percent, escapes, ROT13, spaced-out keys; TAG and reversed text from content/invisible.ts).
 *   Invisible characters are findings of their own.
 * - Each category is one precompiled alternation of named patterns, run once over the whole text,
 *   not per line: matches are rare, so line numbers are computed only for them. The phrase
 *   detectors try the alternation only where a trigger word says a pattern can start.
 * - Every quantifier that can run along a line is bounded, so no input is quadratic in line length.
 * - Phrase patterns ("disable the sandbox", "run the following") are exempt when negated ("does not
 *   allow network access") and, in host-written text only, when reported ("the program attempted
 *   to disable the sandbox"). Concrete actionable steps (`curl … | sh`, `wget https://…`, base64
 *   of an ELF) are never exempt: a result may say THAT something was asked, never HOW.
 * - Findings carry a pattern name, never the matched text: untrusted text is not echoed into
 *   problem messages (they reach quarantine reports and, possibly, an AI).
 */
import { decodeAll } from './content/decode.js';
import { CONTROL_KIND, decodeReversed, decodeTags, findInvisible } from './content/invisible.js';
import { ESCAPED_ANSI, NOT_PLAIN, normalisedView } from './content/normalise.js';
import type { Problem } from '../base/problem.js';
import { findSecrets } from './secrets.js';

export type ForbiddenCategory = 'secret' | 'exec_payload' | 'policy_claim' | 'instruction' | 'hidden_char' | 'terminal_control';

/** Stable problem codes, one per category (the gate may map categories to its own prefix). */
export const FORBIDDEN_CODES = {
  secret: 'TS_SECRET',
  exec_payload: 'TS_EXEC_PAYLOAD',
  policy_claim: 'TS_POLICY_CLAIM',
  instruction: 'TS_INSTRUCTION',
  hidden_char: 'TS_CONTROL_CHAR',
  terminal_control: 'TS_TERMINAL_CONTROL',
} as const satisfies Record<ForbiddenCategory, string>;

export type ForbiddenCode = (typeof FORBIDDEN_CODES)[ForbiddenCategory];

export interface ForbiddenFinding {
  category: ForbiddenCategory;
  code: ForbiddenCode;
  /** 1-based line number (counted from `ScanOptions.firstLine`). */
  line: number;
  /** Stable name of the pattern that matched (e.g. "download piped into an interpreter"). */
  kind: string;
}

export interface ScanOptions {
  /** Line number of the text's first line, so findings carry document line numbers. Default 1. */
  firstLine?: number;
  /**
   * The text was written by the host (a result's Summary or Safety Notes), not by the program:
   * reported requests ("the program attempted to disable the sandbox") are then allowed.
   * Default false: in untrusted text a reported request is still an injection vector.
   */
  hostWritten?: boolean;
  /**
   * Flag fenced code blocks whose info string names an executable language. Default true; off for
   * a stream excerpt's content, where fence lines are program output (data), not markdown.
   */
  checkFences?: boolean;
  /** At most this many findings per category (hostile text can match on every line). Default 50. */
  maxFindings?: number;
  /**
   * The text is raw program output, escaped when it is written into a document (captureStream)
   * or a JSON card: its control characters (ESC, CR, BEL) are terminal controls, reported as a
   * warning, not hidden characters (which a document must not hold raw). Default false.
   */
  rawOutput?: boolean;
  /** Try every pattern at every position instead of where a trigger word is (slower; tests compare both). */
  exhaustive?: boolean;
}

/** Findings that are reported, never a rejection: terminal escapes are escaped when written (docs/forbidden-content.md). */
export const FORBIDDEN_WARNINGS: ReadonlySet<string> = new Set([FORBIDDEN_CODES.terminal_control]);

interface Pattern {
  kind: string;
  source: string;
  /** Exempt when negated, or reported in host-written text. */
  phrase: boolean;
}

interface Detector {
  category: ForbiddenCategory;
  re: RegExp;
  patterns: Pattern[];
  /** The same alternation, sticky: tried only where `trigger` found a place a pattern can start. */
  sticky: RegExp;
  /**
   * Where any pattern can start (its first words, lowercase): one cheap scan instead of trying
   * every pattern at every position. Must list every first word: a test runs both ways on the
   * patterns' own vocabulary.
   */
  trigger?: RegExp;
}

// Each pattern is one capture group of the alternation, so patterns use only (?:…) groups.
function detector(category: ForbiddenCategory, flags: string, patterns: Pattern[], trigger?: RegExp): Detector {
  const source = patterns.map((p) => `(${p.source})`).join('|');
  return { category, re: new RegExp(source, `g${flags}`), sticky: new RegExp(source, `y${flags}`), patterns, ...(trigger ? { trigger } : {}) };
}

// ---------------------------------------------------------------------------------------------
// Executable payloads
// ---------------------------------------------------------------------------------------------

/** Fence info strings naming a language a reader (or an agent) could run. */
const EXEC_LANGS = [
  'sh', 'bash', 'zsh', 'ksh', 'csh', 'tcsh', 'fish', 'dash', 'shell', 'shellscript', 'shell-session', 'shellsession', 'console', 'terminal',
  'powershell', 'pwsh', 'ps1', 'posh', 'bat', 'batch', 'cmd', 'dos', 'vbscript', 'vbs', 'applescript', 'osascript',
  'python', 'python2', 'python3', 'py', 'py3', 'ipython', 'pycon', 'javascript', 'js', 'node', 'nodejs', 'mjs', 'cjs', 'jsx',
  'typescript', 'ts', 'tsx', 'deno', 'ruby', 'rb', 'perl', 'pl', 'php', 'lua', 'tcl', 'r', 'julia', 'awk', 'sed',
  'go', 'golang', 'rust', 'rs', 'c', 'cpp', 'c\\+\\+', 'csharp', 'cs', 'java', 'kotlin', 'swift', 'scala', 'groovy',
  'html', 'xhtml', 'svg', 'hta', 'makefile', 'make', 'dockerfile', 'docker', 'sql', 'asm', 'nasm', 'wasm', 'wat',
];

const B64 = 'A-Za-z0-9+/';

/** Case-sensitive payload patterns. */
const execExact = detector('exec_payload', 'm', [
  { kind: 'shebang line', source: String.raw`^[ \t]*#![ \t]*\/[^\s]`, phrase: false },
  { kind: 'hex-escaped byte string', source: String.raw`(?:\\x[0-9a-fA-F]{2}){16,}`, phrase: false },
  { kind: 'byte array literal', source: String.raw`(?:0x[0-9a-fA-F]{2}[ \t]*,[ \t]*){32,}`, phrase: false },
]);

const DATA_URI_TYPES = [
  String.raw`text\/(?:html|javascript|ecmascript|jscript|vbscript|x-[a-z0-9.+-]*(?:script|sh|python|perl|php|ruby|lua))`,
  String.raw`application\/(?:javascript|ecmascript|x-javascript|x-sh|x-csh|x-shellscript|x-python[a-z0-9.-]*|x-perl|x-php|x-httpd-php|x-ruby|octet-stream|x-msdownload|x-msdos-program|x-ms-installer|x-msi|x-executable|x-elf|x-mach-binary|x-sharedlib|vnd\.microsoft\.portable-executable|x-dosexec|wasm|java-archive|x-java-archive|hta|xhtml\+xml|x-bat|x-powershell)`,
  String.raw`image\/svg\+xml`,
];

/** Case-insensitive payload patterns (run on the lowercased text; patterns are lowercase). */
const execFolded = detector('exec_payload', 'm', [
  { kind: 'data: URI with code', source: String.raw`\bdata:(?:${DATA_URI_TYPES.join('|')})[;,]`, phrase: false },
  { kind: 'script tag', source: String.raw`<script\b`, phrase: false },
  { kind: 'javascript: URL', source: String.raw`\b(?:javascript|vbscript):(?=[^\s])`, phrase: false },
  { kind: 'PowerShell encoded command', source: String.raw`\b(?:powershell|pwsh)(?:\.exe)?\b[^\n]{0,120}?[ \t][-/](?:e|ec|enc|encodedcommand)[ \t]+[${B64}=]{16,}`, phrase: false },
  { kind: 'reverse shell', source: String.raw`\/dev\/(?:tcp|udp)\/[^\s]|\bnc(?:at)?[ \t]+(?:-[a-z]+[ \t]+)*-[ec][ \t]+[^\s]`, phrase: false },
]);

const execFence = detector('exec_payload', 'm', [
  {
    kind: 'fenced code block in an executable language',
    source: String.raw`^ {0,3}(?:\x60{3,}|~{3,})[ \t]*\{?[ \t]*\.?(?:${EXEC_LANGS.join('|')})(?![\w+#-])`,
    phrase: false,
  },
]);

// ---------------------------------------------------------------------------------------------
// Policy-change claims and prompt-injection control phrases
// ---------------------------------------------------------------------------------------------

const CONTROLS = String.raw`sandbox(?:ing)?|seccomp|apparmor|selinux|firewall|isolation|security(?:[ \t]+(?:checks?|polic(?:y|ies)|controls?|restrictions?|scanners?))?|guardrails?|safety[ \t]+(?:checks?|filters?|rules?|measures?)|content[ \t]+filters?|network[ \t]+(?:restrictions?|isolation|polic(?:y|ies)|block(?:ing|s)?)|restrictions?|validation|validators?|approval(?:[ \t]+gate)?|gates?|airlock|allow-?list|whitelist|polic(?:y|ies)|quarantine|monitoring|audit(?:ing)?`;

const policy = detector('policy_claim', 'm', [
  {
    kind: 'claim that a policy should change',
    source: String.raw`\b(?:polic(?:y|ies)|allow-?list|whitelist|sandbox(?:ing)?|rules|restrictions?|permissions?|guardrails?|limits?|firewall)[ \t]+(?:should|must|needs?[ \t]+to|ought[ \t]+to|has[ \t]+to|have[ \t]+to|will[ \t]+have[ \t]+to)[ \t]+(?:(?:now|also|really|definitely)[ \t]+)?(?:be[ \t]+)?(?:allow(?:ed)?|permit(?:ted)?|include[ds]?|changed?|updated?|relax(?:ed)?|loosen(?:ed)?|disabled?|removed?|lifted|lift|extended|extend|expanded|expand|widened|widen|modified|modify|bypassed|bypass|turned[ \t]+off|opened|open|raised|raise|increased|increase|ignored|ignore|whitelisted|allowlisted)\b`,
    phrase: true,
  },
  {
    kind: 'request to disable a security control',
    source: String.raw`\b(?:disable|turn[ \t]+off|switch[ \t]+off|bypass|circumvent|evade|remove|relax|loosen|weaken|lift|skip|escape|break[ \t]+out[ \t]+of|deactivate|get[ \t]+around)[ \t]+(?:(?:the|your|all|any|its|this|these|those|our|every)[ \t]+)?(?:${CONTROLS})\b`,
    phrase: true,
  },
  {
    kind: 'request to extend the allowlist',
    source: String.raw`\badd[ \t]+(?:[^\s;,!?]+[ \t]+){0,6}?to[ \t]+(?:(?:the|your|its|our)[ \t]+)?(?:network[ \t]+|egress[ \t]+|host[ \t]+)?(?:allow-?[ \t]?list|whitelist|allowed[ \t]+(?:hosts|domains|destinations|list)|exceptions?[ \t]+list)\b|\b(?:should|must|needs?[ \t]+to)[ \t]+be[ \t]+(?:allowlisted|whitelisted|added[ \t]+to[ \t]+the[ \t]+(?:allow-?list|whitelist))\b`,
    phrase: true,
  },
  {
    kind: 'request to grant access or privileges',
    source: String.raw`\b(?:grant|give|enable|allow|open(?:[ \t]+up)?|provide|unlock)[ \t]+(?:(?:me|us|it|this|the|that|tool|program|script|agent|model|assistant|sandbox|process|container|full|unrestricted)[ \t]+){0,3}(?:network|internet|outbound|egress|root|sudo|admin(?:istrator)?|elevated|privileged|unrestricted|full|host|filesystem|write|shell)[ \t]+(?:access|privileges?|permissions?|rights|mode)\b`,
    phrase: true,
  },
  {
    kind: 'request to change the policy',
    source: String.raw`\b(?:change|update|modify|edit|rewrite|relax|loosen|weaken|extend|expand|widen|raise|increase|override)[ \t]+(?:(?:the|your|this|its|our)[ \t]+)?(?:(?:host|system|security|sandbox|network|execution|approval)[ \t]+)?(?:polic(?:y|ies)|allow-?list|whitelist|rules[ \t]+file|limits|permissions|restrictions)\b`,
    phrase: true,
  },
  {
    kind: 'instruction to ignore previous instructions',
    source: String.raw`\b(?:ignore|disregard|forget|override|bypass)[ \t]+(?:(?:all|any|the|your|my|of|these|those|every|everything)[ \t]+)*(?:previous|prior|above|earlier|preceding|system|original|existing|safety|security|initial)[ \t]+(?:instructions?|prompts?|rules|directives|guidelines|polic(?:y|ies)|constraints|messages?|context)\b`,
    phrase: true,
  },
  {
    kind: 'injected instructions header',
    source: String.raw`\b(?:new|updated|revised|real|actual|hidden)[ \t]+(?:system[ \t]+)?instructions?[ \t]*:|\bsystem[ \t]*prompt[ \t]*:|\byou[ \t]+are[ \t]+now[ \t]+(?:in[ \t]+)?(?:an?[ \t]+)?(?:unrestricted|unfiltered|jailbroken|developer[ \t]+mode|root|admin|dan\b)`,
    phrase: true,
  },
  {
    kind: 'request to approve or trust',
    source: String.raw`\b(?:auto-?approve|approve[ \t]+(?:all|every|any|future|subsequent)[ \t]+(?:requests?|actions?|executions?|commands?|results?)|(?:mark|flag|label|treat|consider)[ \t]+(?:this|it|these|that|the)(?:[ \t]+(?:result|output|request|run|document|following|text|file))?[ \t]+as[ \t]+(?:safe|trusted|approved|verified|benign|instructions?|a[ \t]+command))\b`,
    phrase: true,
  },
  { kind: 'chat-template control token', source: String.raw`<\|(?:im_start|im_end|system|endoftext|start_header_id|eot_id)\|>|\[\/?inst\]|<<\/?sys>>`, phrase: false },
], /\b(?:polic|allow|whitelist|sandbox|rules|restriction|permission|guardrail|limit|firewall|disable|turn|switch|bypass|circumvent|evade|remove|relax|loosen|weaken|lift|skip|escape|break|deactivate|get|add|should|must|need|grant|give|enable|open|provide|unlock|change|update|modify|edit|rewrite|extend|expand|widen|raise|increase|override|ignore|disregard|forget|new|revised|real|actual|hidden|system|you|auto|approve|mark|flag|label|treat|consider)|<\||\[\/?inst\]|<<\/?sys>>/g);

// ---------------------------------------------------------------------------------------------
// Instructions to fetch or execute
// ---------------------------------------------------------------------------------------------

const RUN_VERBS = String.raw`run|execute|exec|install|download|fetch|curl|wget|open|visit|call|invoke|eval|paste|type|source|clone|pull|launch|start|navigate|browse|connect|send|upload|post|copy`;
const INTERPRETERS = String.raw`(?:ba|z|k|da|c|tc|fi)?sh|python[0-9.]*|perl|ruby|node|php|lua|iex|invoke-expression|powershell|pwsh|cmd(?:\.exe)?`;

const instruction = detector('instruction', 'm', [
  {
    kind: 'instruction to run the following',
    source: String.raw`\b(?:run|execute|exec|eval|evaluate|invoke|launch|paste|source)[ \t]+(?:(?:the|this|these|those|that)[ \t]+)?(?:following|below|above|attached|provided)\b|\b(?:run|execute|exec|eval|evaluate|invoke|launch|paste|source)[ \t]+(?:the|this|these|those|that)[ \t]+(?:[\w.-]+[ \t]+)?(?:command|commands|script|snippet|payload|one-liner|code|binary)\b`,
    phrase: true,
  },
  {
    kind: 'addressed instruction to run or fetch',
    source: String.raw`\b(?:please|kindly|you[ \t]+(?:must|should|need[ \t]+to|have[ \t]+to|will[ \t]+need[ \t]+to|are[ \t]+(?:required|instructed|expected|asked)[ \t]+to)|make[ \t]+sure[ \t]+(?:to|you)|be[ \t]+sure[ \t]+to|go[ \t]+ahead[ \t]+and|proceed[ \t]+to|(?:i|we)[ \t]+need[ \t]+you[ \t]+to|your[ \t]+(?:next[ \t]+)?task[ \t]+is[ \t]+to)[ \t]+(?:(?:now|also|immediately|first|then|just|quickly)[ \t]+)*(?:${RUN_VERBS})\b`,
    phrase: true,
  },
  {
    kind: 'download and execute',
    source: String.raw`\b(?:download|fetch)[ \t]+(?:[^\s.;:!?]+[ \t]+){0,6}?(?:and|then|&&|,)[ \t]+(?:then[ \t]+)?(?:run|execute|exec|install|launch|open|start|source|eval)\b`,
    phrase: true,
  },
  {
    kind: 'instruction to visit a URL',
    source: String.raw`\b(?:visit|open|go[ \t]+to|navigate[ \t]+to|browse[ \t]+to|download(?:[ \t]+from)?|fetch(?:[ \t]+from)?)[ \t]+<?(?:https?|ftp):\/\/`,
    phrase: true,
  },
  {
    kind: 'download piped into an interpreter',
    source: String.raw`\b(?:curl|wget|fetch|iwr|irm|invoke-webrequest|invoke-restmethod|base64|echo|printf|cat|xxd|openssl)\b[^\n|]{0,300}\|[ \t]*(?:sudo[ \t]+)?(?:${INTERPRETERS})\b`,
    phrase: false,
  },
  {
    kind: 'fetch command with a URL',
    source: String.raw`\b(?:wget|curl|iwr|irm|invoke-webrequest|invoke-restmethod|start-bitstransfer|aria2c)[ \t][^\n]{0,300}?\b(?:https?|ftp|sftp|tftp):\/\/|\bgit[ \t]+clone[ \t]+[^\s]|\$\([ \t]*(?:curl|wget)\b|\x60[ \t]*(?:curl|wget)[ \t]`,
    phrase: false,
  },
  {
    kind: 'instruction to install a package',
    source: String.raw`\b(?:run|try|use|type|execute|do)[ \t]*:?[ \t]*[\x60'"]?(?:sudo[ \t]+)?(?:python[0-9.]*[ \t]+-m[ \t]+)?(?:pip[0-9.]*|pipx|npm|npx|yarn|pnpm|gem|cargo|apt(?:-get)?|apk|yum|dnf|brew|choco|winget|conda|go)[ \t]+(?:install|add|get|i)\b`,
    phrase: false,
  },
  {
    kind: 'download cradle',
    source: String.raw`\b(?:iex|invoke-expression)\b[^\n]{0,120}?(?:net\.webclient|downloadstring|\biwr\b|\birm\b|invoke-webrequest|invoke-restmethod)|net\.webclient\)?\.download(?:string|file|data)\b|\bcertutil(?:\.exe)?[ \t][^\n]{0,120}?-urlcache\b|\bmshta(?:\.exe)?[ \t]+(?:https?|javascript|vbscript):`,
    phrase: false,
  },
], /\b(?:run|exec|eval|invoke|launch|paste|source|please|kindly|you|make|be\b|go\b|proceed|i\b|we\b|download|fetch|visit|open|navigate|browse|curl|wget|iwr|irm|base64|echo|printf|cat|xxd|openssl|start-bitstransfer|aria2c|git|try|use|type|do|iex|certutil|mshta)|net\.webclient|\$\(|\x60/g);

/** A reporting verb earlier in the same clause: "the program attempted to …", "stdout asked the reader to …". */
const REPORTED =
  /\b(?:attempt(?:ed|ing|s)|tried|trying|tries|request(?:ed|ing|s)|ask(?:ed|ing|s)|want(?:ed|ing|s)|sought|seeking|prompt(?:ed|ing|s)|urg(?:ed|ing|es)|instruct(?:ed|ing|s)|told|telling|tells|print(?:ed|ing|s)|wr(?:ote|iting|ites)|emit(?:ted|ting|s)|output(?:ted|ting|s)?|contain(?:ed|ing|s)|includ(?:ed|ing|es)|said|says|saying|claim(?:ed|ing|s)|suggest(?:ed|ing|s)|demand(?:ed|ing|s)|recommend(?:ed|ing|s)|(?:was|were)[ \t]+(?:blocked|prevented|denied|stopped)[ \t]+from)\b[^.;:!?]*$/i;
/**
 * A negation right before the phrase: "does not allow network access", "never disable the sandbox".
 * Not "not only", "not just" (they affirm: "you must not only ignore all previous instructions").
 */
const NEGATED = /(?:\bnot|n't|\bnever|\bcannot|\bno)[ \t]+(?!(?:only|just|merely|simply|solely)\b)(?:\w+[ \t]+)?$/i;
/** A negated negation ("you cannot not ignore ..."), which affirms. */
const NEGATION_NEGATED = /(?:\bnot|n't|\bnever|\bcannot|\bno)[ \t]+(?:not|never)[ \t]+(?:\w+[ \t]+)?$/i;

function isExempt(text: string, index: number, hostWritten: boolean): boolean {
  const lineStart = text.lastIndexOf('\n', index - 1) + 1;
  const prefix = text.slice(Math.max(lineStart, index - 200), index);
  return (NEGATED.test(prefix) && !NEGATION_NEGATED.test(prefix)) || (hostWritten && REPORTED.test(prefix));
}

/** Turns match offsets (increasing) into line numbers without splitting the text. */
function lineTracker(text: string, firstLine: number): (index: number) => number {
  let pos = 0;
  let line = firstLine;
  return (index) => {
    for (let i = text.indexOf('\n', pos); i !== -1 && i < index; i = text.indexOf('\n', i + 1)) line++;
    pos = Math.max(pos, index);
    return line;
  };
}

/** Collects findings: one per (line, kind), at most `max` per category. */
class Findings {
  readonly list: ForbiddenFinding[] = [];
  private readonly seen = new Set<string>();
  private readonly counts = new Map<ForbiddenCategory, number>();
  constructor(private readonly max: number) {}
  full(category: ForbiddenCategory): boolean {
    return (this.counts.get(category) ?? 0) >= this.max;
  }
  add(category: ForbiddenCategory, line: number, kind: string): void {
    const key = `${category}\u0000${line}\u0000${kind}`;
    if (this.full(category) || this.seen.has(key)) return;
    this.seen.add(key);
    this.counts.set(category, (this.counts.get(category) ?? 0) + 1);
    this.list.push({ category, code: FORBIDDEN_CODES[category], line, kind });
  }
}

/** The detector's matches in text order: where the trigger says a pattern can start (or everywhere). */
function* matches(d: Detector, text: string, exhaustive: boolean): Generator<RegExpExecArray> {
  if (!d.trigger || exhaustive) {
    d.re.lastIndex = 0;
    for (let m = d.re.exec(text); m !== null; m = d.re.exec(text)) {
      if (m[0].length === 0) d.re.lastIndex++; // defensive: no pattern matches empty, but never loop
      yield m;
    }
    return;
  }
  let from = 0;
  d.trigger.lastIndex = 0;
  for (let t = d.trigger.exec(text); t !== null; t = d.trigger.exec(text)) {
    if (t.index < from) continue;
    d.sticky.lastIndex = t.index;
    const m = d.sticky.exec(text);
    if (m === null) continue;
    from = t.index + Math.max(m[0].length, 1); // where a global search would go on
    yield m;
  }
}

function runDetector(d: Detector, text: string, firstLine: number, hostWritten: boolean, out: Findings, suffix = '', exhaustive = false): void {
  const lineAt = lineTracker(text, firstLine);
  for (const m of matches(d, text, exhaustive)) {
    if (out.full(d.category)) break;
    const p = d.patterns[m.findIndex((g, k) => k > 0 && g !== undefined) - 1];
    if (!p || (p.phrase && isExempt(text, m.index, hostWritten))) continue;
    out.add(d.category, lineAt(m.index), p.kind + suffix);
  }
}

function runSecrets(text: string, firstLine: number, out: Findings, suffix = ''): void {
  for (const s of findSecrets(text)) out.add('secret', firstLine + s.lineIndex, s.kind + suffix);
}

type Which = { secrets: boolean; exec: boolean; fences: boolean; phrases: boolean; exhaustive?: boolean };

/**
 * The pattern detectors over one (normalised) text. The case-insensitive ones run on the text
 * lowercased once, without the `i` flag: a third faster than case folding in every regex.
 */
function scanView(view: string, firstLine: number, hostWritten: boolean, which: Which, out: Findings, suffix = ''): void {
  if (which.secrets) runSecrets(view, firstLine, out, suffix);
  if (!which.exec && !which.phrases) return;
  const lower = view.toLowerCase();
  const all = which.exhaustive ?? false;
  if (which.exec) {
    runDetector(execExact, view, firstLine, hostWritten, out, suffix, all);
    runDetector(execFolded, lower, firstLine, hostWritten, out, suffix, all);
    if (which.fences) runDetector(execFence, lower, firstLine, hostWritten, out, suffix, all);
  }
  if (which.phrases) {
    runDetector(policy, lower, firstLine, hostWritten, out, suffix, all);
    runDetector(instruction, lower, firstLine, hostWritten, out, suffix, all);
  }
}

/** Decoded text is read twice at most (base64 of base64); deeper nesting is reported as what it is. */
const MAX_DECODE_DEPTH = 2;

/**
 * Decodes what is encoded in `view` (and the TAG characters and right-to-left runs of `raw`) and
 * scans the decoded text as untrusted program output. Binary payloads (an ELF in base64) are
 * reported directly.
 */
function scanDecoded(raw: string, view: string, firstLine: number, which: Which, out: Findings, depth: number, plain = false): void {
  const { decoded, binary } = decodeAll(view);
  if (which.exec) for (const b of binary) out.add('exec_payload', firstLine + b.line, b.kind);
  if (!plain) {
    for (const t of decodeTags(raw)) decoded.push({ line: lineIndexOf(raw, t.index), text: t.text, via: 'Unicode tag' });
    for (const t of decodeReversed(raw)) decoded.push({ line: lineIndexOf(raw, t.index), text: t.text, via: 'right-to-left reversed' });
  }
  for (const d of decoded) {
    const inner = normalisedView(d.text);
    const only: Which = d.secretsOnly ? { secrets: which.secrets, exec: false, fences: false, phrases: false } : { ...which, fences: false };
    // Every finding in the decoded text is reported on the line where the encoded run starts.
    const line = firstLine + d.line;
    const sub = new Findings(Number.MAX_SAFE_INTEGER);
    scanView(inner, line, false, only, sub);
    if (depth < MAX_DECODE_DEPTH && !d.secretsOnly) scanDecoded(d.text, inner, line, only, sub, depth + 1);
    for (const f of sub.list) out.add(f.category, line, `${f.kind} (in ${d.via} text)`);
  }
}

const lineIndexOf = (text: string, index: number): number => {
  let n = 0;
  for (let i = text.indexOf('\n'); i !== -1 && i < index; i = text.indexOf('\n', i + 1)) n++;
  return n;
};

const ALL: Which = { secrets: true, exec: true, fences: true, phrases: true };

/** Embedded secrets (secrets.ts patterns, on the normalised view); the kind names the credential format, never the value. */
export function findSecretContent(text: string, opts: ScanOptions = {}): ForbiddenFinding[] {
  return scanOnly(text, opts, { secrets: true, exec: false, fences: false, phrases: false }, ['secret']);
}

/** Inline executable payloads: shebangs, encoded binaries and blobs, code data: URIs, script tags, exec-language fences. */
export function findExecPayloads(text: string, opts: ScanOptions = {}): ForbiddenFinding[] {
  return scanOnly(text, opts, { secrets: false, exec: true, fences: opts.checkFences ?? true, phrases: false }, ['exec_payload']).sort((a, b) => a.line - b.line);
}

/** Claims that policy should change, requests to disable controls or grant access, prompt-injection phrases. */
export function findPolicyClaims(text: string, opts: ScanOptions = {}): ForbiddenFinding[] {
  return scanOnly(text, opts, { secrets: false, exec: false, fences: false, phrases: true }, ['policy_claim']);
}

/** New instructions to fetch or execute: "run the following", `curl … | sh`, "please execute", `wget https://…`. */
export function findInstructions(text: string, opts: ScanOptions = {}): ForbiddenFinding[] {
  return scanOnly(text, opts, { secrets: false, exec: false, fences: false, phrases: true }, ['instruction']);
}

/** One category family on the normalised view, encoded runs decoded (binary payloads included). */
function scanOnly(text: string, opts: ScanOptions, which: Which, keep: ForbiddenCategory[]): ForbiddenFinding[] {
  const out = new Findings(opts.maxFindings ?? 50);
  const view = normalisedView(text);
  const first = opts.firstLine ?? 1;
  scanView(view, first, opts.hostWritten ?? false, which, out);
  scanDecoded(text, view, first, which, out, 1);
  return out.list.filter((f) => keep.includes(f.category));
}

/**
 * Invisible and format characters that hide text (invisible.ts says which, and where they are
 * fine). In raw program output (`rawOutput`) control characters are terminal controls instead: a
 * warning, since the host escapes them when it writes them.
 */
export function findHiddenChars(text: string, opts: ScanOptions = {}): ForbiddenFinding[] {
  const out = new Findings(opts.maxFindings ?? 50);
  const lineAt = lineTracker(text, opts.firstLine ?? 1);
  const seen = new Set<string>();
  for (const h of findInvisible(text)) {
    const category: ForbiddenCategory = h.kind === CONTROL_KIND && opts.rawOutput ? 'terminal_control' : 'hidden_char';
    if (out.full(category)) continue;
    // One finding per kind and line (a TAG-encoded sentence is one finding, not forty), naming the first.
    const line = lineAt(h.index);
    if (seen.has(`${line}\u0000${h.kind}`)) continue;
    seen.add(`${line}\u0000${h.kind}`);
    out.add(category, line, `${h.kind} U+${h.codePoint.toString(16).toUpperCase().padStart(4, '0')}`);
  }
  return out.list;
}

/** Terminal escape sequences written as text (`\x1b[31m`): one warning per line. */
function findEscapedAnsi(text: string, firstLine: number, out: Findings): void {
  if (!text.includes('\\') || !ESCAPED_ANSI.test(text)) return;
  text.split('\n').forEach((l, i) => {
    if (l.includes('\\') && ESCAPED_ANSI.test(l)) out.add('terminal_control', firstLine + i, 'terminal escape sequence (written escaped)');
  });
}

/**
 * Everything, ordered by line: invisible characters in the text as given, the pattern detectors on
 * its normalised view (normalise.ts), and again on every encoded run decoded (decode.ts). This is
 * the one entry point the doors use (the Tool Result contract per section, runAction on streams).
 */
export function findForbiddenContent(text: string, opts: ScanOptions = {}): ForbiddenFinding[] {
  const out = new Findings(opts.maxFindings ?? 50);
  // Printable ASCII (most output) holds no invisible character, needs no NFKC and spells no tags.
  const plain = !NOT_PLAIN.test(text);
  const first = opts.firstLine ?? 1;
  if (!plain) for (const f of findHiddenChars(text, opts)) out.add(f.category, f.line, f.kind);
  findEscapedAnsi(text, first, out);
  const view = normalisedView(text, plain);
  const which = { ...ALL, fences: opts.checkFences ?? true, exhaustive: opts.exhaustive ?? false };
  scanView(view, first, opts.hostWritten ?? false, which, out);
  scanDecoded(text, view, first, which, out, 1, plain);
  return out.list.sort((a, b) => a.line - b.line);
}

/** Problem message for a finding: what matched (by pattern name) and what to do; never the text itself. */
export function forbiddenMessage(f: ForbiddenFinding): string {
  switch (f.category) {
    case 'secret':
      return `embedded secret (${f.kind}): remove or redact it; results must not carry credentials`;
    case 'exec_payload':
      return `inline executable payload (${f.kind}): store code or binaries as artifacts referenced by sha256, never inline`;
    case 'policy_claim':
      return `claim that policy should change (${f.kind}): a result may report that something asked for this, but not ask for it`;
    case 'instruction':
      return `instruction to fetch or execute (${f.kind}): report what was requested without actionable steps`;
    case 'hidden_char':
      return `hidden character (${f.kind}): it hides text from a reader or splits a word past the detectors; write it visibly (e.g. \\u200b)`;
    case 'terminal_control':
      return `terminal control (${f.kind}): a terminal would act on it (colour, cursor moves, hidden text); the detectors read the text without it`;
  }
}

/** One piece of untrusted content a door is about to hand on, and where it is (`stdout`, `result.outputs[0].path`). */
export interface ContentPart {
  where: string;
  text: string;
}

/** What a door's screen found: errors (the content is not handed on) and warnings (reported). */
export interface Screening {
  problems: Problem[];
  warnings: Problem[];
}

/**
 * The screen every door applies to untrusted content before handing it on (program output, a
 * UTP result, output file names): findForbiddenContent, read as program output (no reported-
 * request exemption, fences are data, control characters are terminal controls). A problem
 * names the code, the part (`path`) and the line in it, never the content.
 */
export function screenContent(parts: readonly ContentPart[]): Screening {
  const screening: Screening = { problems: [], warnings: [] };
  for (const part of parts) {
    if (part.text === '') continue;
    for (const f of findForbiddenContent(part.text, { hostWritten: false, checkFences: false, rawOutput: true })) {
      const p: Problem = { code: f.code, message: forbiddenMessage(f), path: part.where, line: f.line };
      if (FORBIDDEN_WARNINGS.has(f.code)) screening.warnings.push({ ...p, severity: 'warning' });
      else screening.problems.push(p);
    }
  }
  return screening;
}

/** A key that may appear in a reported path; any other key (it may be the finding) is named by position. */
const PLAIN_KEY = /^[a-z][a-z0-9_]{0,31}$/;

/**
 * The string leaves of a JSON value, and its keys (an echoed argument can put text in a key), as
 * content parts named by their path (`result.stdout.text`, `result.echo[#2]`).
 */
export function jsonParts(value: unknown, where: string, out: ContentPart[] = []): ContentPart[] {
  if (typeof value === 'string') out.push({ where, text: value });
  else if (Array.isArray(value)) value.forEach((v, i) => jsonParts(v, `${where}[${i}]`, out));
  else if (value !== null && typeof value === 'object') {
    Object.entries(value).forEach(([k, v], i) => {
      const at = PLAIN_KEY.test(k) ? `${where}.${k}` : `${where}[#${i}]`;
      if (at.endsWith(']')) out.push({ where: `${at} (key)`, text: k });
      jsonParts(v, at, out);
    });
  }
  return out;
}
