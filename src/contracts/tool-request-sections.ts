import type { BodyLine, Section } from './markdown.js';
import type { Problem } from '../base/problem.js';
import { hasErrorsSince, trProblem } from './tool-request-rules.js';
import { DATA_SENSITIVITIES, RISK_LEVELS, type Backend, type DataSensitivity, type NetworkMode, type RiskAssessment, type RiskLevel, type ToolInput, type ToolOutput } from './tool-request-schema.js';

/** The `## ` sections of a request, in order; the first differs by backend. */
export const SECTION_TITLES: Record<Backend, readonly string[]> = {
  ns: ['Command', 'Input Files', 'Output Expectations', 'Risk Assessment'],
  monty: ['Code', 'Input Files', 'Output Expectations', 'Risk Assessment'],
};

/**
 * Checks presence, order, uniqueness and absence of extra `## ` sections. Returns the first
 * section of each expected title. An invalid backend is inferred from which first section exists.
 */
export function pickSections(sections: Section[], backend: Backend | undefined, problems: Problem[]): Map<string, Section> {
  const effective: Backend = backend ?? (sections.some((s) => s.title === 'Code') && !sections.some((s) => s.title === 'Command') ? 'monty' : 'ns');
  const expected = SECTION_TITLES[effective];
  const found = new Map<string, Section>();
  let lastPos = -1;
  for (const s of sections) {
    const pos = expected.indexOf(s.title);
    if (pos < 0) {
      // Code or a command the backend will not run would mislead the approver: an error. Other sections are extra text.
      const other = s.title === 'Code' ? 'is only for `backend: monty`: this backend would not run it' : s.title === 'Command' ? 'is not run with `backend: monty` (it runs `## Code`)' : undefined;
      if (other) {
        problems.push(trProblem('TR_SECTION_WRONG_BACKEND', `\`## ${s.title}\` ${other}`, s.line));
        continue;
      }
      const near = expected.find((t) => t.toLowerCase() === s.title.toLowerCase());
      const why = near ? `is not a section name; write it as \`## ${near}\`` : 'is not one of the four request sections (Airlock uses a `### ` subsection inside one of them)';
      problems.push(trProblem('TR_SECTION_UNKNOWN', `\`## ${s.title.slice(0, 60)}\` ${why}`, s.line));
      continue;
    }
    if (found.has(s.title)) {
      problems.push(trProblem('TR_SECTION_DUPLICATE', `\`## ${s.title}\` appears again (first at line ${found.get(s.title)!.line})`, s.line));
      continue;
    }
    if (pos < lastPos) {
      problems.push(trProblem('TR_SECTION_ORDER', `\`## ${s.title}\` comes after \`## ${expected[lastPos]}\`; the order is ${expected.join(', ')}`, s.line));
    }
    lastPos = Math.max(lastPos, pos);
    found.set(s.title, s);
  }
  for (const t of expected) if (!found.has(t)) problems.push(trProblem('TR_SECTION_MISSING', `the \`## ${t}\` section is missing (sections: ${expected.join(', ')})`));
  return found;
}

const IN_MENTION = /(?<![\w./-])\/in\/([A-Za-z0-9._+-]+)/g;
const OUT_MENTION = /(?<![\w./-])\/out\/([^\s`'"()<>[\],;*|]+)/g;
const HEX64 = /(?<![0-9a-fA-F])[0-9a-fA-F]{64}(?![0-9a-fA-F])/g;

/** Every match of a global regex in `text` (matchAll without its per-call copy of the regex: hot path). */
function matches(re: RegExp, text: string): RegExpExecArray[] {
  const found: RegExpExecArray[] = [];
  re.lastIndex = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    found.push(m);
    if (m[0] === '') re.lastIndex++;
  }
  re.lastIndex = 0;
  return found;
}

/** `name...` -> `name` (a sentence's full stop after a path is not part of it). */
function trimDots(s: string): string {
  let e = s.length;
  while (e > 0 && s.charCodeAt(e - 1) === 46) e--;
  return e === s.length ? s : s.slice(0, e);
}

/** `## Input Files` lists every declared input at /in/<name>, no other /in file, and no wrong hash. */
export function checkInputFiles(section: Section, body: BodyLine[], inputs: ToolInput[], problems: Problem[]): void {
  const byName = new Map(inputs.map((i) => [i.name, i]));
  const listed = new Set<string>();
  for (const { text, line } of body) {
    if (!text.includes('/in/')) continue;
    const onLine: ToolInput[] = [];
    for (const m of matches(IN_MENTION, text)) {
      const name = trimDots(m[1]!);
      const input = byName.get(name);
      if (input) {
        listed.add(name);
        onLine.push(input);
      } else if (name !== '') problems.push(trProblem('TR_INPUT_UNDECLARED', `/in/${name.slice(0, 80)} is listed but is not a declared input; declare it with its sha256 or remove it`, line));
    }
    if (onLine.length === 1) {
      for (const h of matches(HEX64, text)) {
        if (h[0] !== onLine[0]!.sha256) problems.push(trProblem('TR_INPUT_HASH_MISMATCH', `the sha256 written for /in/${onLine[0]!.name} differs from the one in inputs`, line));
      }
    }
  }
  for (const i of inputs) {
    if (!listed.has(i.name)) problems.push(trProblem('TR_INPUT_NOT_LISTED', `input ${i.name} is declared but \`## Input Files\` does not list /in/${i.name}`, section.line));
  }
}

/** `## Output Expectations` lists every declared output at /out/..., and no other /out path. */
export function checkOutputExpectations(section: Section, body: BodyLine[], outputs: ToolOutput[], problems: Problem[]): void {
  const declared = new Set(outputs.map((o) => o.path));
  const listed = new Set<string>();
  for (const { text, line } of body) {
    if (!text.includes('/out/')) continue;
    for (const m of matches(OUT_MENTION, text)) {
      const path = `/out/${m[1]!.replace(/[.:]+$/, '')}`;
      if (declared.has(path)) listed.add(path);
      else if (path !== '/out/') problems.push(trProblem('TR_OUTPUT_UNDECLARED', `${path.slice(0, 80)} is listed but not declared in outputs_expected`, line));
    }
  }
  for (const o of outputs) {
    if (!listed.has(o.path)) problems.push(trProblem('TR_OUTPUT_NOT_LISTED', `output ${o.path} is declared but \`## Output Expectations\` does not list it`, section.line));
  }
}

const RISK_LINE = /^\s*(?:[-*+]\s+)?(\*\*|__)?(risk level|justification|data sensitivity|network rationale)\s*(?::\s*\1|\1\s*:)(.*)$/i;
const NO_NETWORK = /^(?:none|n\/a|na|no|-|not needed|no network(?: needed)?)\.?$/i;
const unwrap = (v: string): string => v.trim().replace(/^[*_`]+|[*_`]+$/g, '').trim();

/** Reads the four Risk Assessment lines; null when any is missing or wrong (problems say which). */
export function checkRiskAssessment(section: Section, body: BodyLine[], network: NetworkMode | undefined, problems: Problem[]): RiskAssessment | null {
  const seen = new Map<string, { value: string; line: number }>();
  const start = problems.length;
  const codeOf = { 'risk level': 'TR_RISK_LEVEL', justification: 'TR_RISK_JUSTIFICATION', 'data sensitivity': 'TR_RISK_SENSITIVITY', 'network rationale': 'TR_RISK_NETWORK_RATIONALE' } as const;
  for (const { text, line } of body) {
    const m = RISK_LINE.exec(text);
    if (!m) continue;
    const label = m[2]!.toLowerCase() as keyof typeof codeOf;
    if (seen.has(label)) {
      problems.push(trProblem(codeOf[label], `\`${m[2]}:\` appears twice (first at line ${seen.get(label)!.line}); keep one`, line));
      continue;
    }
    seen.set(label, { value: m[3]!.trim(), line });
  }
  const get = (label: keyof typeof codeOf, example: string): { value: string; line: number } | undefined => {
    const v = seen.get(label);
    if (!v) problems.push(trProblem(codeOf[label], `\`## Risk Assessment\` has no \`${example}\` line`, section.line));
    return v;
  };
  const level = get('risk level', 'Risk level: low|medium|high');
  if (level && !(RISK_LEVELS as readonly string[]).includes(unwrap(level.value).toLowerCase())) {
    problems.push(trProblem('TR_RISK_LEVEL', `Risk level is ${JSON.stringify(level.value.slice(0, 40))}; write low, medium or high`, level.line));
  }
  const justification = get('justification', 'Justification: <text>');
  if (justification && unwrap(justification.value) === '') problems.push(trProblem('TR_RISK_JUSTIFICATION', 'Justification is empty; say why the risk level is right on the same line', justification.line));
  const sensitivity = get('data sensitivity', 'Data sensitivity: public|internal|confidential');
  if (sensitivity && !(DATA_SENSITIVITIES as readonly string[]).includes(unwrap(sensitivity.value).toLowerCase())) {
    problems.push(trProblem('TR_RISK_SENSITIVITY', `Data sensitivity is ${JSON.stringify(sensitivity.value.slice(0, 40))}; write public, internal or confidential`, sensitivity.line));
  }
  // The spec asks for a rationale only if network is needed: without network, Airlock's `none` line is a warning.
  const usesNetwork = network === 'allowlist';
  const rationale = usesNetwork ? get('network rationale', 'Network rationale: <why each host is needed>') : seen.get('network rationale');
  const v = rationale ? unwrap(rationale.value) : '';
  if (!usesNetwork && v === '') {
    problems.push(trProblem('TR_RISK_NETWORK_RATIONALE_OMITTED', 'no network is used and the Network rationale is missing or empty; Airlock writes `Network rationale: none`', rationale?.line ?? section.line));
  } else if (usesNetwork && rationale && v === '') {
    problems.push(trProblem('TR_RISK_NETWORK_RATIONALE', 'Network rationale is empty; say why the network is needed', rationale.line));
  } else if (usesNetwork && NO_NETWORK.test(v)) {
    problems.push(trProblem('TR_RISK_NETWORK_RATIONALE', 'network is allowlist but the rationale says none; say why each allowlisted host is needed', rationale?.line ?? section.line));
  }
  if (hasErrorsSince(problems, start) || !level || !justification || !sensitivity || (usesNetwork && !rationale)) return null;
  return {
    level: unwrap(level.value).toLowerCase() as RiskLevel,
    justification: justification.value,
    dataSensitivity: unwrap(sensitivity.value).toLowerCase() as DataSensitivity,
    networkRationale: rationale?.value ?? '',
  };
}

const FENCE_OPEN = /^\s*(```|~~~)\s*([A-Za-z0-9_+-]*)\s*$/;
const FENCE_ANY = /^\s*(```|~~~)/;

/** `## Code` (backend monty): Python source, plain or in one ```python fence. Null on problems. */
export function checkCode(section: Section, body: BodyLine[], problems: Problem[]): string | null {
  if (body.length === 0) {
    problems.push(trProblem('TR_CODE_BLOCK', '`## Code` is empty; write the Python code (optionally in a ```python block)', section.line));
    return null;
  }
  const fences = body.filter((l) => FENCE_ANY.test(l.text));
  if (fences.length === 0) return body.map((l) => l.text).join('\n');
  const first = body[0]!;
  const last = body[body.length - 1]!;
  const open = FENCE_OPEN.exec(first.text);
  const lang = open?.[2]?.toLowerCase() ?? '';
  const closeOk = body.length >= 2 && last.text.trim() === open?.[1];
  if (!open || fences.length !== 2 || !closeOk || !['', 'python', 'py', 'python3'].includes(lang)) {
    const at = !open ? first.line : fences.find((f) => f !== first && f !== last)?.line ?? last.line;
    problems.push(trProblem('TR_CODE_BLOCK', '`## Code` must be Python code, or exactly one ```python fence with nothing outside it', at));
    return null;
  }
  const code = body.slice(1, -1).map((l) => l.text).join('\n');
  if (code.trim() === '') {
    problems.push(trProblem('TR_CODE_BLOCK', 'the ```python block in `## Code` is empty', first.line));
    return null;
  }
  return code;
}
