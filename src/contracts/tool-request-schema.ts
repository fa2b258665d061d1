import * as z from 'zod';

/**
 * Types of a parsed Tool Execution Request and the zod schema of its front matter as written in
 * the file (published as JSON Schema; the cross-field rules are in the contract, see the
 * schema's description).
 *
 * Naming: `frontMatter` keeps the file's snake_case field names (it is the YAML, normalised);
 * everything Airlock derives (command, inputs with paths, outputs, risk) is camelCase.
 */

export const REQUESTED_BY = ['human', 'core_draft'] as const;
export const LANGUAGES = ['python', 'node', 'ts', 'go', 'ruby', 'shell_forbidden'] as const;
export const NETWORK_MODES = ['none', 'allowlist'] as const;
export const BACKENDS = ['ns', 'monty'] as const;
export const RISK_LEVELS = ['low', 'medium', 'high'] as const;
export const DATA_SENSITIVITIES = ['public', 'internal', 'confidential'] as const;

export type RequestedBy = (typeof REQUESTED_BY)[number];
/** A language a valid request can have (`shell_forbidden` is in the spec's enum but always rejected). */
export type Language = Exclude<(typeof LANGUAGES)[number], 'shell_forbidden'>;
export type NetworkMode = (typeof NETWORK_MODES)[number];
export type Backend = (typeof BACKENDS)[number];
export type RiskLevel = (typeof RISK_LEVELS)[number];
export type DataSensitivity = (typeof DATA_SENSITIVITIES)[number];

/** `2026-02-09T16:05:01Z`, optionally with milliseconds. The date itself is checked in code. */
export const TIMESTAMP_RE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,3})?Z$/;
/** TR-YYYYMMDD-HHMMSSZ-<slug>; groups: date, time, slug. */
export const REQUEST_ID_RE = /^TR-(\d{8})-(\d{6})Z-([a-z0-9][a-z0-9_-]{0,63})$/;
export const SHA256_RE = /^[0-9a-f]{64}$/;
/** A plain file name under /in: no slashes, not `.`/`..`, no leading `-` (it would read as an option). */
export const INPUT_NAME_RE = /^(?!\.\.?$)(?!-)[A-Za-z0-9._+-]{1,255}$/;
/** A positive decimal number written as a string (cpu_limit: "2" in the spec). */
export const POSITIVE_DECIMAL_RE = /^(?=.*[1-9])\d+(?:\.\d+)?$/;
const NON_BLANK = /\S/;

/** The front matter after normalisation: defaults applied, cpu_limit a number. */
export interface ToolRequestFrontMatter {
  request_type: 'tool_request';
  schema_version: 1;
  request_id: string;
  created_utc: string;
  requested_by: RequestedBy;
  approved_by: string;
  approved_utc: string;
  purpose: string;
  language: Language;
  /** Default `ns`. */
  backend: Backend;
  /** Default `none`. */
  network: NetworkMode;
  /** Default `[]`; non-empty exactly when network is allowlist. */
  network_allowlist: string[];
  /** Cores; the file may say "2" or 2. */
  cpu_limit: number;
  memory_limit_mb: number;
  time_limit_sec: number;
  inputs: { name: string; sha256: string }[];
  /** Paths as written (relative or /out/...); see ToolRequest.outputs for the normalised ones. */
  outputs_expected: { path: string; description: string }[];
  constraints: string[];
}

export interface ToolInput {
  name: string;
  sha256: string;
  /** Where the sandbox mounts it: `/in/<name>`. */
  path: string;
}

export interface ToolOutput {
  /** Absolute, under /out (`output.json` in the file means `/out/output.json`). */
  path: string;
  description: string;
}

/** The `## Command` line (backend ns). Airlock execs `argv`; no shell is involved. */
export interface ToolCommand {
  /** The line as written (trimmed). */
  raw: string;
  /** The POSIX shell words of the line after quote removal. */
  argv: string[];
  /** argv[0], e.g. `python3`. */
  interpreter: string;
  /** The script run by the interpreter as an absolute path, e.g. `/in/script.py`. */
  script: string;
}

export interface RiskAssessment {
  level: RiskLevel;
  justification: string;
  dataSensitivity: DataSensitivity;
  networkRationale: string;
}

/** Each section's body without its heading and surrounding blank lines (render writes these back). */
export interface ToolRequestSections {
  /** `## Command` body (backend ns), else null. */
  command: string | null;
  /** `## Code` body as written, fence included (backend monty), else null. */
  code: string | null;
  inputFiles: string;
  outputExpectations: string;
  riskAssessment: string;
}

export interface ToolRequest {
  frontMatter: ToolRequestFrontMatter;
  /** Text between the front matter and the first section (e.g. a `# Title`), trimmed; '' if none. */
  preamble: string;
  sections: ToolRequestSections;
  /** Backend ns: the command to exec. Null for backend monty. */
  command: ToolCommand | null;
  /** Backend monty: the Python source without its fence. Null for backend ns. */
  code: string | null;
  inputs: ToolInput[];
  outputs: ToolOutput[];
  risk: RiskAssessment;
}

const timestamp = z.string().regex(TIMESTAMP_RE).describe('UTC timestamp, e.g. 2026-02-09T16:05:01Z');

/** The front matter as written in a TR-*.md file. */
export const toolRequestFrontMatterSchema = z
  .strictObject({
    request_type: z.literal('tool_request'),
    schema_version: z.literal(1),
    request_id: z.string().regex(REQUEST_ID_RE).describe('TR-YYYYMMDD-HHMMSSZ-<slug>; the timestamp equals created_utc'),
    created_utc: timestamp,
    requested_by: z.enum(REQUESTED_BY),
    approved_by: z.string().regex(NON_BLANK),
    approved_utc: timestamp.describe('not before created_utc'),
    purpose: z.string().regex(NON_BLANK),
    language: z.enum(['python', 'node', 'ts', 'go', 'ruby']).describe('shell_forbidden is part of the ThreeGate enum but always rejected'),
    backend: z.enum(BACKENDS).optional().describe('default ns; monty requires language python and network none'),
    network: z.enum(NETWORK_MODES).optional().describe('default none'),
    network_allowlist: z.array(z.string().regex(NON_BLANK)).optional().describe('non-empty exactly when network is allowlist'),
    cpu_limit: z.union([z.number().positive(), z.string().regex(POSITIVE_DECIMAL_RE)]).describe('cores'),
    memory_limit_mb: z.number().int().positive(),
    time_limit_sec: z.number().int().positive(),
    inputs: z.array(z.strictObject({ name: z.string().regex(INPUT_NAME_RE), sha256: z.string().regex(SHA256_RE) })),
    outputs_expected: z.array(
      z.strictObject({
        path: z.string().min(1).describe('relative (= /out/<path>) or absolute under /out/; no .. segments'),
        description: z.string().regex(NON_BLANK),
      }),
    ),
    constraints: z.array(z.string().regex(NON_BLANK)),
  })
  .describe(
    'Front matter of a Tool Execution Request (TR-*.md). Further rules checked by Airlock: unique input names, ' +
      'network_allowlist non-empty only and always with network allowlist, approved_utc >= created_utc, ' +
      'request_id timestamp = created_utc, output paths under /out/.',
  );
