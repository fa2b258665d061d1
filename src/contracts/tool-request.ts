import { detectKind } from './detect.js';
import { parseFrontMatterDocument, sectionBody, type BodyLine } from './markdown.js';
import { settle, type Contract } from './problem.js';
import { type Problem, type Result } from '../base/problem.js';
import { renderFrontMatterDocument } from './render.js';
import { normalizeText } from './text.js';
import { checkCommand } from './tool-request-command.js';
import { scanContent } from './tool-request-content.js';
import { validateFrontMatter } from './tool-request-front-matter.js';
import { TOOL_REQUEST_WARNINGS, toolRequestRules, trProblem } from './tool-request-rules.js';
import { toolRequestFrontMatterSchema, type ToolCommand, type ToolRequest } from './tool-request-schema.js';
import { checkCode, checkInputFiles, checkOutputExpectations, checkRiskAssessment, pickSections } from './tool-request-sections.js';

/**
 * Tool Execution Request (ThreeGate `TR-*.md`): parse + every rule, render, detect.
 * Spec: /work/shared/specs/tool-request.schema.md. Command rules: docs/tool-request.md.
 *
 * The parsed value (ToolRequest) keeps the front matter in the file's snake_case (normalised:
 * defaults applied, cpu_limit a number), the sections' text, and camelCase derived facts
 * (command argv, inputs with /in paths, outputs as /out paths, risk fields). `render` writes the
 * front matter, preamble and section texts; the derived facts are recomputed by parse.
 */

export type * from './tool-request-schema.js';
export { shellWords } from './shell-words.js';
export { toolRequestRules } from './tool-request-rules.js';

const FILE_NAME_RE = /^(TR-\d{8}-\d{6}Z-[a-z0-9][a-z0-9_-]{0,63})\.md$/;

const baseName = (fileName: string): string => fileName.slice(Math.max(fileName.lastIndexOf('/'), fileName.lastIndexOf('\\')) + 1);
const joinLines = (lines: BodyLine[]): string => lines.map((l) => l.text).join('\n');

/** A hostile document (2,000 headings, 10,000 bad inputs) cannot flood the report: at most this many problems per code. */
const MAX_PER_CODE = 20;

function capPerCode(problems: Problem[]): Problem[] {
  const counts = new Map<string, number>();
  const kept: Problem[] = [];
  for (const p of problems) {
    const n = (counts.get(p.code) ?? 0) + 1;
    counts.set(p.code, n);
    if (n <= MAX_PER_CODE) kept.push(p);
  }
  for (const [code, n] of counts) if (n > MAX_PER_CODE) kept.push({ code, message: `${n - MAX_PER_CODE} more ${code} problems not shown; fix the ones above first` });
  return kept;
}

/** Parses and validates a Tool Execution Request. Never throws. */
export function parseToolRequest(input: string, opts?: { fileName?: string }): Result<ToolRequest> {
  const text = normalizeText(input);
  const problems: Problem[] = [];
  const fileId = opts?.fileName !== undefined ? FILE_NAME_RE.exec(baseName(opts.fileName)) : undefined;
  if (opts?.fileName !== undefined && !fileId) {
    problems.push(trProblem('TR_FILE_NAME', `file name ${JSON.stringify(baseName(opts.fileName).slice(0, 80))} is not TR-YYYYMMDD-HHMMSSZ-<slug>.md; name it <request_id>.md`));
  }
  const parsed = parseFrontMatterDocument(text);
  if (!parsed.ok) {
    problems.push(...parsed.problems);
    scanContent(text, problems);
    return settle<ToolRequest>(null, capPerCode(problems), TOOL_REQUEST_WARNINGS);
  }
  const doc = parsed.value;
  const facts = validateFrontMatter(doc.data as Record<string, unknown>, doc.lineOf, problems);
  const fm = facts.frontMatter;
  const requestId = (doc.data as Record<string, unknown>).request_id;
  if (fileId && typeof requestId === 'string' && fileId[1] !== requestId) {
    problems.push(trProblem('TR_ID_FILE_MISMATCH', `file name says ${fileId[1]} but request_id is ${JSON.stringify(requestId.slice(0, 80))}; they must agree`, doc.lineOf(['request_id']), 'request_id'));
  }

  const found = pickSections(doc.sections, facts.backend, problems);
  const language = facts.language === 'shell_forbidden' ? undefined : facts.language;
  let command: ToolCommand | null = null;
  let code: string | null = null;
  const commandSection = found.get('Command');
  const codeSection = found.get('Code');
  const commandBody = commandSection ? sectionBody(commandSection) : [];
  const codeBody = codeSection ? sectionBody(codeSection) : [];
  if (commandSection) command = checkCommand(commandBody, commandSection.line, language, facts.inputs, problems);
  if (codeSection) code = checkCode(codeSection, codeBody, problems);

  const inputSection = found.get('Input Files');
  const inputBody = inputSection ? sectionBody(inputSection) : [];
  if (inputSection && facts.inputs) checkInputFiles(inputSection, inputBody, facts.inputs, problems);
  const outputSection = found.get('Output Expectations');
  const outputBody = outputSection ? sectionBody(outputSection) : [];
  if (outputSection && facts.outputs) checkOutputExpectations(outputSection, outputBody, facts.outputs, problems);
  const riskSection = found.get('Risk Assessment');
  const riskBody = riskSection ? sectionBody(riskSection) : [];
  const risk = riskSection ? checkRiskAssessment(riskSection, riskBody, facts.network, problems) : null;

  scanContent(text, problems);

  if (!fm || !risk || !facts.inputs || !facts.outputs) {
    // Every path to a null above pushed an error; this guard only keeps the types honest.
    const r = settle<ToolRequest>(null, capPerCode(problems), TOOL_REQUEST_WARNINGS);
    if (!r.ok && r.problems.length === 0) r.problems.push(trProblem('TR_FIELD_MISSING', 'the request is incomplete'));
    return r;
  }
  let preStart = 0;
  let preEnd = doc.preamble.length;
  while (preStart < preEnd && doc.preamble[preStart]!.text.trim() === '') preStart++;
  while (preEnd > preStart && doc.preamble[preEnd - 1]!.text.trim() === '') preEnd--;
  return settle<ToolRequest>(
    {
      frontMatter: fm,
      preamble: joinLines(doc.preamble.slice(preStart, preEnd)),
      sections: {
        command: commandSection ? joinLines(commandBody) : null,
        code: codeSection ? joinLines(codeBody) : null,
        inputFiles: joinLines(inputBody),
        outputExpectations: joinLines(outputBody),
        riskAssessment: joinLines(riskBody),
      },
      command,
      code,
      inputs: facts.inputs,
      outputs: facts.outputs,
      risk,
    },
    capPerCode(problems),
    TOOL_REQUEST_WARNINGS,
  );
}

/** Writes a request so that parseToolRequest gives the same value back. */
export function renderToolRequest(v: ToolRequest): string {
  const fm = v.frontMatter as unknown as Record<string, unknown>;
  const first = v.frontMatter.backend === 'monty' ? { title: 'Code', body: v.sections.code ?? '' } : { title: 'Command', body: v.sections.command ?? '' };
  const sections = [
    first,
    { title: 'Input Files', body: v.sections.inputFiles },
    { title: 'Output Expectations', body: v.sections.outputExpectations },
    { title: 'Risk Assessment', body: v.sections.riskAssessment },
  ];
  const full = renderFrontMatterDocument(fm, sections);
  if (v.preamble.trim() === '') return full;
  const head = renderFrontMatterDocument(fm, []).length;
  return `${full.slice(0, head)}\n${v.preamble}\n${full.slice(head)}`;
}

export const toolRequestContract: Contract<ToolRequest> = {
  kind: 'tool-request',
  detect: (fileName, text) => detectKind(fileName, text) === 'tool-request',
  parse: parseToolRequest,
  render: renderToolRequest,
  rules: toolRequestRules,
  schemas: { 'tool-request.front-matter': toolRequestFrontMatterSchema },
};
