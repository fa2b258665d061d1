import * as z from 'zod';

/**
 * The Tool Result's types, constants and the front matter schema (spec: tool-result.schema.md).
 * The zod schema describes the front matter after tool-result-front-matter.ts has read it leniently
 * (unknown fields set aside, sha256 lowercased, a `/out/` prefix taken off artifact paths).
 */

export const SIGNALS = {
  SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGILL: 4, SIGTRAP: 5, SIGABRT: 6, SIGBUS: 7, SIGFPE: 8, SIGKILL: 9, SIGUSR1: 10,
  SIGSEGV: 11, SIGUSR2: 12, SIGPIPE: 13, SIGALRM: 14, SIGTERM: 15, SIGSTKFLT: 16, SIGCHLD: 17, SIGCONT: 18, SIGSTOP: 19,
  SIGTSTP: 20, SIGTTIN: 21, SIGTTOU: 22, SIGURG: 23, SIGXCPU: 24, SIGXFSZ: 25, SIGVTALRM: 26, SIGPROF: 27, SIGWINCH: 28,
  SIGIO: 29, SIGPWR: 30, SIGSYS: 31,
} as const;
export type SignalName = keyof typeof SIGNALS;

export interface ToolResultArtifact {
  /** Relative path of the file under /out or in the artifact store (`output.json`, `logs/run.txt`). */
  path: string;
  sha256: string;
  /** The Outputs section's `Description:` line, when there is one. */
  description?: string;
}

/** How a stream appears in the document: its first lines and, when cut, where the rest is. */
export interface StreamExcerpt {
  /** The first lines of the stream, at most MAX_STREAM_LINES, without line terminators. */
  lines: string[];
  /** Set when the stream had more lines than shown; `artifact` holds the full stream. */
  truncated: { total_lines: number; artifact: string } | null;
}

export interface ToolResult {
  result_id: string;
  created_utc: string;
  request_id: string;
  executor: string;
  backend: string;
  exit_code: number;
  signal?: SignalName;
  timed_out?: boolean;
  runtime_sec: number;
  network_used: 'none' | 'allowlist';
  network_destinations: string[];
  artifacts: ToolResultArtifact[];
  stdout_sha256: string;
  stderr_sha256: string;
  /** The Summary section's text (what ran, whether it succeeded, what it produced). */
  summary: string;
  /**
   * `limits` holds Airlock's `name=number` form; `limits_text` is set instead (limits then `{}`)
   * when the result states its limits another way, e.g. `2 CPU, 1024 MB memory, 120 s wall time`.
   */
  provenance: { command: string; backend: string; limits: Record<string, number>; limits_text?: string };
  stdout: StreamExcerpt;
  stderr: StreamExcerpt;
  safety_notes: { untrusted_output: string; unexpected_behavior: string; network_confirmation: string };
}

export const MAX_STREAM_LINES = 200;
export const SECTION_TITLES = ['Summary', 'Provenance', 'Outputs', 'Stdout', 'Stderr', 'Safety Notes'] as const;
export const REQUIRED_LIMITS = ['cpu', 'memory_mb', 'time_sec'] as const;

/** Same shape as the Tool Request's REQUEST_ID_RE (kept in sync by hand; groups: date, time). */
export const REQUEST_ID_RE = /^TR-(\d{8})-(\d{6})Z-[a-z0-9][a-z0-9_-]{0,63}$/;
/** The result id Airlock writes (the spec's recommended naming); groups: date, time, request id. */
export const RESULT_ID_RE = /^TS-(\d{8})-(\d{6})Z-(TR-\d{8}-\d{6}Z-[a-z0-9][a-z0-9_-]{0,63})$/;
/** Any result id Airlock accepts: a plain identifier (it becomes a file name and a log field). */
const RESULT_ID_SAFE_RE = /^[A-Za-z0-9][A-Za-z0-9._:+-]{0,199}$/;
export const TIMESTAMP_RE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,3})?Z$/;
export const SHA256_RE = /^[0-9a-f]{64}$/;
/** Relative path: segments without `/`, `\`, control characters, not empty, `.` or `..`. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
export const ARTIFACT_PATH_RE = /^(?!\s)(?!.*\s$)(?!\.\.?(?:\/|$))(?!.*\/\.\.?(?:\/|$))(?!.*\/\/)(?!.*\/$)[^/\\\u0000-\u001f\u007f][^\\\u0000-\u001f\u007f]{0,1023}$/;
/** host[:port], IPv4[:port] or [IPv6][:port]: a destination actually contacted, no scheme or path. */
export const DESTINATION_RE = /^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]+\])(?::\d{1,5})?$/i;
/** What a result may list: a destination as above, or an http(s) URL as allowlists are written. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
const LISTED_DESTINATION_RE = /^(?:(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]+\])(?::\d{1,5})?|https?:\/\/[^\s/?#@\u0000-\u001f\u007f]+(?:[/?#][^\s\u0000-\u001f\u007f]*)?)$/i;
// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
const SINGLE_LINE_RE = /^[^\u0000-\u001f\u007f]*\S[^\u0000-\u001f\u007f]*$/;

const singleLine = (max: number) => z.string().max(max).regex(SINGLE_LINE_RE);
const sha256 = () => z.string().regex(SHA256_RE);

export const toolResultFrontMatterSchema = z
  .strictObject({
    result_type: z.literal('tool_result'),
    schema_version: z.literal(1),
    result_id: z.string().regex(RESULT_ID_SAFE_RE).describe('Airlock writes TS-<created_utc as YYYYMMDD-HHMMSSZ>-<request_id>'),
    created_utc: z.string().regex(TIMESTAMP_RE),
    request_id: z.string().regex(REQUEST_ID_RE),
    executor: singleLine(200),
    backend: singleLine(200),
    exit_code: z.int().min(-2147483648).max(4294967295).describe('Exit status; a process killed by a signal reports 128 + the signal number'),
    signal: z.enum(Object.keys(SIGNALS) as [SignalName, ...SignalName[]]).optional().describe('Signal that killed the process (then exit_code = 128 + its number)'),
    timed_out: z.boolean().optional().describe('True when the host killed the process for exceeding the time limit'),
    runtime_sec: z.number().min(0),
    network_used: z.enum(['none', 'allowlist']),
    network_destinations: z.array(z.string().max(300).regex(LISTED_DESTINATION_RE)).max(256).describe('host[:port] (or http(s) URL) contacted; non-empty exactly when network_used is allowlist'),
    artifacts: z.array(z.strictObject({ path: z.string().regex(ARTIFACT_PATH_RE), sha256: sha256() })).max(1000),
    stdout_sha256: sha256().describe('sha256 of the full stdout bytes'),
    stderr_sha256: sha256().describe('sha256 of the full stderr bytes'),
  })
  .describe(
    'Front matter of a Tool Execution Result (TS-*.md), as Airlock reads it: unknown fields are reported and set aside, sha256 digests lowercased, ' +
      'a /out/ prefix taken off artifact paths. Further rules: signal implies exit_code = 128 + signal number, destinations non-empty exactly with allowlist, ' +
      'unique artifact paths, and the body sections (see docs/contracts.md).',
  );

export type FrontMatter = z.infer<typeof toolResultFrontMatterSchema>;
