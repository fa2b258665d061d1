import type { Problem } from '../base/problem.js';
import { MAX_STREAM_LINES, REQUIRED_LIMITS, SECTION_TITLES, SHA256_RE, type StreamExcerpt, type ToolResult } from './tool-result-schema.js';

/**
 * The Tool Result body: its `## ` sections and what each holds. Read as the spec allows (labels
 * with or without bullets and bold, streams fenced or as plain lines, outputs as list or table);
 * Airlock's own exact form is reported when missing (warnings), never required. Refused is only
 * what is unsafe: an unclosed fence, duplicate sections and statements, and unfenced program
 * output holding a line that could be document structure (TS_STREAM_AMBIGUOUS).
 *
 * This module does its own section split instead of using markdown.ts's sections: that one
 * toggles on any fence line, so a stream containing ``` could end the fence early and forge a
 * section.
 */

export interface SectionSpan {
  title: string;
  /** 0-based index of the heading line. */
  heading: number;
  /** Body lines are [start, end). */
  start: number;
  end: number;
}

interface Fence {
  ch: string;
  len: number;
  at: number;
}

const FENCE_OPEN = /^ {0,3}(`{3,}|~{3,})(.*)$/;
const FENCE_CLOSE = /^ {0,3}(`{3,}|~{3,})[ \t]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]|$)/;

function opensFence(line: string, at: number): Fence | null {
  const m = FENCE_OPEN.exec(line);
  if (!m) return null;
  const marks = m[1] as string;
  if (marks[0] === '`' && (m[2] as string).includes('`')) return null; // CommonMark: not a fence
  return { ch: marks[0] as string, len: marks.length, at };
}

function closesFence(line: string, f: Fence): boolean {
  const m = FENCE_CLOSE.exec(line);
  return m !== null && (m[1] as string)[0] === f.ch && (m[1] as string).length >= f.len;
}

/**
 * Splits the body into `## ` sections with CommonMark fence rules: a fence closes only on a line
 * of the same character, at least as long, with nothing after it. Reports stray headings,
 * text before the first section and an unclosed fence.
 */
export function splitSections(lines: string[], bodyStart: number, problems: Problem[]): SectionSpan[] {
  const sections: SectionSpan[] = [];
  let fence: Fence | null = null;
  const before = (i: number, what: string) => problems.push({ code: 'TS_SECTION_UNEXPECTED', message: `${what} before the first section: Airlock starts the body with \`## Summary\``, line: i + 1 });
  for (let i = bodyStart; i < lines.length; i++) {
    const t = lines[i] as string;
    const c = t.charCodeAt(0);
    // Only lines starting with ` ~ # or a space can open/close a fence or be a heading.
    if (c !== 96 && c !== 126 && c !== 35 && c !== 32) {
      if (sections.length === 0 && fence === null && t.trim() !== '') before(i, 'text');
      continue;
    }
    if (fence) {
      if (closesFence(t, fence)) fence = null;
      continue;
    }
    const opened = opensFence(t, i);
    if (opened) {
      fence = opened;
      if (sections.length === 0) before(i, 'a code block');
      continue;
    }
    const h = HEADING.exec(t);
    if (h && t.startsWith('## ') && (h[1] as string).length === 2) {
      const prev = sections.at(-1);
      if (prev) prev.end = i;
      sections.push({ title: t.slice(3).trim(), heading: i, start: i + 1, end: lines.length });
    } else if (h && (h[1] as string).length <= 2) {
      problems.push({ code: 'TS_SECTION_UNEXPECTED', message: 'a `#`/`##` heading other than the six sections (Airlock uses `###` inside a section)', line: i + 1 });
    } else if (sections.length === 0 && t.trim() !== '') {
      before(i, 'text');
    }
  }
  if (fence) {
    problems.push({ code: 'TS_FENCE_UNCLOSED', message: 'code fence opened here is never closed, so everything after it is hidden inside it', line: fence.at + 1 });
  }
  return sections;
}

/** Checks presence, order and uniqueness; returns the first section of each known title. */
export function indexSections(sections: SectionSpan[], lineCount: number, problems: Problem[]): Map<string, SectionSpan> {
  const byTitle = new Map<string, SectionSpan>();
  let lastRank = -1;
  for (const s of sections) {
    const rank = (SECTION_TITLES as readonly string[]).indexOf(s.title);
    if (rank < 0) {
      problems.push({ code: 'TS_SECTION_UNEXPECTED', message: `section \`## ${s.title.slice(0, 60)}\` is not one of ${SECTION_TITLES.join(', ')}; its text is read as host text`, line: s.heading + 1 });
      continue;
    }
    if (byTitle.has(s.title)) {
      problems.push({ code: 'TS_SECTION_ORDER', message: `section \`## ${s.title}\` appears twice; keep one`, line: s.heading + 1 });
      continue;
    }
    if (rank < lastRank) {
      problems.push({ code: 'TS_SECTION_ORDER', message: `section \`## ${s.title}\` is out of order: the order is ${SECTION_TITLES.join(', ')}`, line: s.heading + 1 });
    }
    lastRank = Math.max(lastRank, rank);
    byTitle.set(s.title, s);
  }
  for (const t of SECTION_TITLES) {
    if (!byTitle.has(t)) problems.push({ code: 'TS_SECTION_MISSING', message: `section \`## ${t}\` is missing`, line: lineCount });
  }
  return byTitle;
}

const isBlank = (s: string): boolean => s.trim() === '';

/** Non-blank lines of a section as [index, text]. */
function contentLines(lines: string[], s: SectionSpan): [number, string][] {
  const out: [number, string][] = [];
  for (let i = s.start; i < s.end; i++) if (!isBlank(lines[i] as string)) out.push([i, lines[i] as string]);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Summary
// ---------------------------------------------------------------------------------------------

export function parseSummary(lines: string[], s: SectionSpan, problems: Problem[]): string {
  let a = s.start;
  let b = s.end;
  while (a < b && isBlank(lines[a] as string)) a++;
  while (b > a && isBlank(lines[b - 1] as string)) b--;
  if (a === b) problems.push({ code: 'TS_SUMMARY', message: 'Summary is empty: say what ran, whether it succeeded and what it produced', line: s.heading + 1 });
  return lines.slice(a, b).join('\n');
}

// ---------------------------------------------------------------------------------------------
// Labelled statements (Provenance, Safety Notes)
// ---------------------------------------------------------------------------------------------

/** `Label: value`, `- Label: value`, `**Label:** value`, `**Label**: value`, `` `Label:` value ``. */
function labelPattern(labels: string): RegExp {
  return new RegExp(`^[ \\t]*(?:[-*+][ \\t]+)?(?:\\*\\*|__|\`)?(${labels})(?::(?:\\*\\*|__|\`)?|(?:\\*\\*|__|\`):)(?:[ \\t]+(.*))?$`, 'i');
}

interface Labelled {
  /** Key -> value (continuation lines joined with \n) and the 0-based lines it spans. */
  found: Map<string, { value: string; lines: number[] }>;
}

/**
 * Reads a section of labelled statements. A line under a statement that is not a label continues
 * it (Airlock writes one line each: reported with `formCode`); a line before any label and a
 * second statement of one key are reported too (`duplicateCode`: which one counts is ambiguous).
 */
function readLabelled(
  lines: string[],
  s: SectionSpan,
  pattern: RegExp,
  keyOf: (label: string) => string,
  codes: { form: string; duplicate: string; section: string },
  problems: Problem[],
): Labelled {
  const found = new Map<string, { value: string; lines: number[] }>();
  let current: { value: string; lines: number[] } | null = null;
  for (const [i, t] of contentLines(lines, s)) {
    const m = pattern.exec(t);
    if (m) {
      const key = keyOf(m[1] as string);
      if (found.has(key)) {
        problems.push({ code: codes.duplicate, message: `\`${m[1]}:\` appears twice in ${codes.section}; keep one`, line: i + 1 });
        current = null;
        continue;
      }
      current = { value: (m[2] ?? '').trim(), lines: [i] };
      found.set(key, current);
      continue;
    }
    if (!current) {
      problems.push({ code: codes.form, message: `a line in ${codes.section} that is not one of its statements (Airlock writes only the statements)`, line: i + 1 });
      continue;
    }
    const more = t.trim();
    if (/^(?:`{3,}|~{3,})/.test(more)) continue; // a fence around a multi-line value is layout
    if (current.lines.length === 1) problems.push({ code: codes.form, message: `a statement in ${codes.section} continues on this line (Airlock writes one line each)`, line: i + 1 });
    current.value = current.value === '' ? more : `${current.value}\n${more}`;
    current.lines.push(i);
  }
  return { found };
}

/** A labelled value for the writer: continuation lines go on their own lines, indented. */
export const labelledLine = (label: string, value: string): string => `${label}: ${value.split('\n').join('\n  ')}`;

// ---------------------------------------------------------------------------------------------
// Provenance
// ---------------------------------------------------------------------------------------------

const PROVENANCE_LABEL = labelPattern('exact command(?: executed)?|command(?: executed)?|executed command|backend(?: identity)?|(?:resource )?limits(?: applied)?|resources(?: limits)?');
const LIMIT_TOKEN = /^([a-z][a-z0-9_]{0,31})=(\d{1,21}(?:\.\d{1,30})?)$/;

export interface Provenance {
  command: string;
  backend: string;
  limits: Record<string, number>;
  limits_text?: string;
  /** 1-based lines of the command: a record of what ran, not an instruction. */
  commandLines: number[];
}

const provenanceKey = (label: string): string => (/command/i.test(label) ? 'command' : /backend/i.test(label) ? 'backend' : 'limits');

export function parseProvenance(lines: string[], s: SectionSpan, problems: Problem[]): Provenance {
  const { found } = readLabelled(lines, s, PROVENANCE_LABEL, provenanceKey, { form: 'TS_PROVENANCE_FORM', duplicate: 'TS_PROVENANCE', section: 'Provenance' }, problems);
  const get = (key: string, label: string, what: string): string => {
    const f = found.get(key);
    if (!f) problems.push({ code: 'TS_PROVENANCE', message: `Provenance lacks \`${label}:\` (${what})`, line: s.heading + 1 });
    else if (f.value === '') problems.push({ code: 'TS_PROVENANCE', message: `\`${label}:\` is empty: give ${what}`, line: (f.lines[0] as number) + 1 });
    return f?.value ?? '';
  };
  const command = get('command', 'Command', 'the exact command executed');
  const backend = get('backend', 'Backend', 'the backend identity and version');
  const limitsText = get('limits', 'Limits', 'the resource limits applied');
  const limitsAt = (found.get('limits')?.lines[0] ?? s.heading) + 1;
  const commandLines = (found.get('command')?.lines ?? []).map((i) => i + 1);
  if (limitsText === '') return { command, backend, limits: {}, commandLines };
  const limits = airlockLimits(limitsText);
  if (!limits) {
    problems.push({ code: 'TS_PROVENANCE_FORM', message: 'the limits are not in Airlock\'s `name=number` form (e.g. cpu=2 memory_mb=1024 time_sec=120); they are kept as text', line: limitsAt });
    return { command, backend, limits: {}, limits_text: limitsText, commandLines };
  }
  const missing = REQUIRED_LIMITS.filter((k) => !Object.hasOwn(limits, k));
  if (missing.length > 0) problems.push({ code: 'TS_PROVENANCE_FORM', message: `\`Limits:\` lacks ${missing.map((k) => `\`${k}=…\``).join(', ')} (Airlock writes ${REQUIRED_LIMITS.join(', ')})`, line: limitsAt });
  return { command, backend, limits, commandLines };
}

/** `cpu=2 memory_mb=1024 time_sec=120` as numbers, or null when the text is in another form. */
function airlockLimits(text: string): Record<string, number> | null {
  const limits: Record<string, number> = {};
  for (const tok of text.split(/[ \t,]+/).filter((x) => x !== '')) {
    const m = LIMIT_TOKEN.exec(tok);
    if (!m || Object.hasOwn(limits, m[1] as string)) return null;
    limits[m[1] as string] = Number(m[2]);
  }
  return limits;
}

// ---------------------------------------------------------------------------------------------
// Outputs
// ---------------------------------------------------------------------------------------------

/** Airlock's own entry line; the path may hold spaces. */
const OUTPUT_ENTRY = /^[-*][ \t]+\/out\/(.+?)[ \t]+sha256:[ \t]*([^\s]*)[ \t]*$/;
const DESCRIPTION_LINE = /^[ \t]*(?:[-*+][ \t]+)?Description:(?:[ \t]+(.*))?$/i;
const NONE_LINE = /^(?:none|\(none\)|no outputs?|no artifacts?)\.?$/i;
const ANY_SHA256 = /(?<![0-9a-fA-F])[0-9a-fA-F]{64}(?![0-9a-fA-F])/;
const OUT_PATH = /\/out\/([^\s`|,;()]+)/;
const TABLE_RULE = /^\|?[ \t]*:?-{3,}/;

export interface OutputEntry {
  path: string;
  sha256: string;
  description?: string;
  line: number;
}

/**
 * One output named on a line in another layout (`- output.json (sha256: …)`, a table row): a
 * `/out/<path>` or a front matter artifact path, and a 64-hex digest if there is one.
 */
function looseEntry(t: string, known: ReadonlySet<string>, line: number): OutputEntry | null {
  const sha = ANY_SHA256.exec(t)?.[0].toLowerCase() ?? '';
  const out = OUT_PATH.exec(t)?.[1];
  const path = out ?? t.split(/[\s|`,;()]+/).find((w) => known.has(w));
  return path === undefined ? null : { path, sha256: sha, line };
}

export function parseOutputs(lines: string[], s: SectionSpan, known: ReadonlySet<string>, problems: Problem[]): OutputEntry[] {
  const entries: OutputEntry[] = [];
  const content = contentLines(lines, s);
  if (content.length === 1 && NONE_LINE.test((content[0] as [number, string])[1].trim())) return entries;
  const form = (line: number, message: string) => problems.push({ code: 'TS_OUTPUTS_FORM', message, line });
  let last: OutputEntry | null = null;
  for (const [i, t] of content) {
    const e = OUTPUT_ENTRY.exec(t);
    if (e && SHA256_RE.test(e[2] as string)) {
      last = { path: e[1] as string, sha256: e[2] as string, line: i + 1 };
      entries.push(last);
      continue;
    }
    const d = DESCRIPTION_LINE.exec(t);
    if (d && last && last.description === undefined && (d[1] ?? '').trim() !== '') {
      last.description = (d[1] as string).trim();
      continue;
    }
    if (TABLE_RULE.test(t.trim())) continue; // a table's header rule is layout
    const loose = d ? null : looseEntry(t, known, i + 1);
    if (loose) {
      form(i + 1, loose.sha256 === '' ? 'this output has no sha256 (Airlock writes `- /out/<path> sha256: <hex>`)' : 'this output is not written `- /out/<path> sha256: <hex>` (read anyway)');
      last = loose;
      entries.push(loose);
      continue;
    }
    if (!d && t.trim().startsWith('|') && entries.length === 0) continue; // a table's header row is layout
    form(i + 1, d ? 'a `Description:` line that does not follow an output entry (or repeats one)' : 'a line in Outputs that names no output (Airlock writes `- /out/<path> sha256: <hex>` entries or `None.`)');
  }
  if (content.length === 0) form(s.heading + 1, 'Outputs is empty (Airlock writes `None.` when there are no artifacts)');
  return entries;
}

// ---------------------------------------------------------------------------------------------
// Stdout / Stderr
// ---------------------------------------------------------------------------------------------

const TRUNCATION_NOTE = /^\[truncated: first (\d{1,9}) of (\d{1,9}) lines shown; full stream in artifact (.+) sha256 ([0-9a-f]{64})\]$/;
const EMPTY_STREAM = /^[([<]?(?:empty|none|no output|nothing|n\/a)[)\]>]?\.?$/i;

export interface ParsedStream {
  excerpt: StreamExcerpt;
  /** Whether the stream is in a fence: unfenced program output is checked for forged structure. */
  fenced: boolean;
  noteLine: number;
  noteSha: string | null;
}

/** Airlock's truncation note on line `j`, checked against the lines shown. */
function readNote(t: string, j: number, shown: number, problems: Problem[]): { truncated: StreamExcerpt['truncated']; sha: string } | null {
  const m = TRUNCATION_NOTE.exec(t.trim());
  if (!m) return null;
  const first = Number(m[1]);
  const total = Number(m[2]);
  if (first !== shown) problems.push({ code: 'TS_TRUNCATION_FORM', message: `the note says ${first} lines are shown but ${shown} are`, line: j + 1 });
  if (total <= shown) problems.push({ code: 'TS_TRUNCATION_FORM', message: `the note gives ${total} lines in total, not more than the ${shown} shown: Airlock drops the note when nothing was cut`, line: j + 1 });
  return { truncated: { total_lines: total, artifact: m[3] as string }, sha: m[4] as string };
}

export function parseStream(lines: string[], s: SectionSpan, name: 'Stdout' | 'Stderr', problems: Problem[]): ParsedStream | null {
  let i = s.start;
  let end = s.end;
  while (i < end && isBlank(lines[i] as string)) i++;
  while (end > i && isBlank(lines[end - 1] as string)) end--;
  const block = (message: string, line: number) => problems.push({ code: 'TS_STREAM_BLOCK', message, line });
  const open = i < end ? opensFence(lines[i] as string, i) : null;
  if (!open) return unfencedStream(lines, s, i, end, name, problems);
  if (!/^```+text[ \t]*$/.test(lines[i] as string)) block(`${name} is fenced, but not as Airlock writes it (\`\`\`text)`, i + 1);
  let close = i + 1;
  while (close < s.end && !closesFence(lines[close] as string, open)) close++;
  if (close >= s.end) return null; // unclosed: splitSections reported it
  const shown = lines.slice(i + 1, close);
  if (shown.length > MAX_STREAM_LINES) problems.push({ code: 'TS_STREAM_TOO_LONG', message: `${name} shows ${shown.length} lines; Airlock shows at most ${MAX_STREAM_LINES} and stores the full stream as an artifact`, line: i + 2 });
  let truncated: StreamExcerpt['truncated'] = null;
  let noteLine = -1;
  let noteSha: string | null = null;
  for (let j = close + 1; j < end; j++) {
    const t = lines[j] as string;
    if (isBlank(t)) continue;
    const note = noteLine < 0 ? readNote(t, j, shown.length, problems) : null;
    if (note) {
      noteLine = j + 1;
      truncated = note.truncated;
      noteSha = note.sha;
    } else if (/truncat|cut|omitted/i.test(t)) {
      problems.push({ code: 'TS_TRUNCATION_FORM', message: 'a truncation note that is not Airlock\'s `[truncated: first N of T lines shown; full stream in artifact <path> sha256 <hex>]` (or a second one)', line: j + 1 });
    } else {
      block(`text after the ${name} block (Airlock writes only the truncation note there); it is read as program output`, j + 1);
    }
  }
  return { excerpt: { lines: shown, truncated }, fenced: true, noteLine, noteSha };
}

const SAFETY_WORDS = 'Untrusted Output Statement|Unexpected behavior|Network confirmation';
export const SAFETY_LABEL = labelPattern(SAFETY_WORDS);

/**
 * A stream written as plain lines (or `(empty)`). Accepted, unless a line could be document
 * structure: a heading, a safety statement label or a fence opener cannot be told from the
 * host's own, so the result is refused rather than guessed (TS_STREAM_AMBIGUOUS).
 */
function unfencedStream(lines: string[], s: SectionSpan, from: number, to: number, name: string, problems: Problem[]): ParsedStream {
  const content = lines.slice(from, to);
  if (content.length === 0 || (content.length === 1 && EMPTY_STREAM.test((content[0] as string).trim()))) {
    if (content.length === 0) problems.push({ code: 'TS_STREAM_BLOCK', message: `${name} is empty; Airlock writes an empty \`\`\`text block`, line: s.heading + 1 });
    else problems.push({ code: 'TS_STREAM_BLOCK', message: `${name} says it is empty in words; Airlock writes an empty \`\`\`text block`, line: from + 1 });
    return { excerpt: { lines: [], truncated: null }, fenced: false, noteLine: -1, noteSha: null };
  }
  problems.push({ code: 'TS_STREAM_BLOCK', message: `${name} is written as plain lines; Airlock writes a \`\`\`text block (fenced, program output cannot pose as document structure)`, line: from + 1 });
  let shown = content;
  let note: ReturnType<typeof readNote> = null;
  const last = to - 1;
  if (content.length > 1) note = readNote(lines[last] as string, last, content.length - 1, problems);
  if (note) shown = content.slice(0, -1);
  for (let j = from; j < from + shown.length; j++) {
    const t = lines[j] as string;
    if (HEADING.test(t) || SAFETY_LABEL.test(t)) {
      problems.push({ code: 'TS_STREAM_AMBIGUOUS', message: `a line of the unfenced ${name} looks like a heading or a safety statement: it cannot be told from the document's own; fence the stream`, line: j + 1 });
    }
  }
  if (shown.length > MAX_STREAM_LINES) problems.push({ code: 'TS_STREAM_TOO_LONG', message: `${name} shows ${shown.length} lines; Airlock shows at most ${MAX_STREAM_LINES}`, line: from + 1 });
  return { excerpt: { lines: shown, truncated: note?.truncated ?? null }, fenced: false, noteLine: note ? last + 1 : -1, noteSha: note?.sha ?? null };
}

// ---------------------------------------------------------------------------------------------
// Safety Notes
// ---------------------------------------------------------------------------------------------

export const SAFETY_LABELS = { untrusted_output: 'Untrusted Output Statement', unexpected_behavior: 'Unexpected behavior', network_confirmation: 'Network confirmation' } as const;
export type SafetyKey = keyof typeof SAFETY_LABELS;
const SAFETY_KEYS: Record<string, SafetyKey> = { 'untrusted output statement': 'untrusted_output', 'unexpected behavior': 'unexpected_behavior', 'network confirmation': 'network_confirmation' };

export function parseSafetyNotes(lines: string[], s: SectionSpan, problems: Problem[]): { notes: ToolResult['safety_notes']; lines: Record<SafetyKey, number> } {
  const { found } = readLabelled(lines, s, SAFETY_LABEL, (l) => SAFETY_KEYS[l.toLowerCase()] as SafetyKey, { form: 'TS_SAFETY_NOTES_FORM', duplicate: 'TS_SAFETY_NOTES', section: 'Safety Notes' }, problems);
  const notes = { untrusted_output: '', unexpected_behavior: '', network_confirmation: '' };
  const at: Record<SafetyKey, number> = { untrusted_output: -1, unexpected_behavior: -1, network_confirmation: -1 };
  for (const key of Object.keys(SAFETY_LABELS) as SafetyKey[]) {
    const f = found.get(key);
    if (!f) {
      problems.push({ code: 'TS_SAFETY_NOTES', message: `Safety Notes lacks \`${SAFETY_LABELS[key]}:\``, line: s.heading + 1 });
      continue;
    }
    at[key] = (f.lines[0] as number) + 1;
    notes[key] = f.value;
    if (f.value === '') problems.push({ code: 'TS_SAFETY_NOTES', message: `\`${SAFETY_LABELS[key]}:\` is empty`, line: at[key] });
  }
  if (at.untrusted_output >= 0 && notes.untrusted_output !== '' && !/\buntrusted\b/i.test(notes.untrusted_output)) {
    problems.push({ code: 'TS_SAFETY_NOTES', message: 'the Untrusted Output Statement must say the output is untrusted and must not be treated as instructions', line: at.untrusted_output });
  }
  return { notes, lines: at };
}
