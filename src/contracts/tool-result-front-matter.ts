import type { Problem } from '../base/problem.js';
import { TOOL_RESULT_WARNINGS, type ToolResultCode } from './tool-result-rules.js';
import { REQUEST_ID_RE, RESULT_ID_RE, SIGNALS, TIMESTAMP_RE, toolResultFrontMatterSchema, type FrontMatter } from './tool-result-schema.js';

/**
 * The Tool Result front matter: read leniently where the spec is loose (fields it does not name
 * are reported and set aside, uppercase digests and `/out/`-prefixed artifact paths are read as
 * Airlock writes them), then checked against the schema and the cross-field rules.
 */

const OPTIONAL_FIELDS = new Set<string>(['signal', 'timed_out']);
const FIELDS = new Set(Object.keys(toolResultFrontMatterSchema.shape));
const ARTIFACT_FIELDS = new Set(['path', 'sha256']);
const SHA_FIELDS = ['stdout_sha256', 'stderr_sha256'];
const ANY_CASE_SHA256 = /^[0-9a-fA-F]{64}$/;

/** Which code and what to say for a bad value, by field (artifact items by their own key). */
const FIELD_RULES: Record<string, { code: ToolResultCode; expect: string }> = {
  result_type: { code: 'TS_FIELD_INVALID', expect: 'must be `tool_result`' },
  schema_version: { code: 'TS_SCHEMA_VERSION', expect: 'must be the number 1' },
  result_id: { code: 'TS_RESULT_ID', expect: 'must be a plain identifier (letters, digits, `.` `_` `:` `+` `-`, at most 200), e.g. TS-20260209-161030Z-TR-20260209-160501Z-python-stats' },
  created_utc: { code: 'TS_TIMESTAMP', expect: 'must be a UTC time like 2026-02-09T16:10:30Z' },
  request_id: { code: 'TS_REQUEST_ID', expect: 'must look like TR-20260209-160501Z-python-stats (lowercase slug)' },
  executor: { code: 'TS_FIELD_INVALID', expect: 'must be a non-empty single-line string of at most 200 characters' },
  backend: { code: 'TS_FIELD_INVALID', expect: 'must be a non-empty single-line string of at most 200 characters' },
  exit_code: { code: 'TS_EXIT_STATUS', expect: 'must be an integer (128 + signal number for a killed process)' },
  signal: { code: 'TS_EXIT_STATUS', expect: 'must be a Linux signal name such as SIGKILL' },
  timed_out: { code: 'TS_EXIT_STATUS', expect: 'must be true or false' },
  runtime_sec: { code: 'TS_RUNTIME', expect: 'must be a number of seconds >= 0' },
  network_used: { code: 'TS_NETWORK', expect: 'must be `none` or `allowlist`' },
  network_destinations: { code: 'TS_NETWORK', expect: 'must be a list (at most 256) of host[:port] strings or http(s) URLs, e.g. pypi.org:443' },
  artifacts: { code: 'TS_FIELD_INVALID', expect: 'must be a list (at most 1000) of {path, sha256} items' },
  path: { code: 'TS_ARTIFACT_PATH', expect: 'must be a relative path under /out such as `output.json` (no other leading `/`, no `.`/`..`/empty segments, no backslash)' },
  sha256: { code: 'TS_SHA256', expect: 'must be 64 hex characters' },
  stdout_sha256: { code: 'TS_SHA256', expect: 'must be 64 hex characters' },
  stderr_sha256: { code: 'TS_SHA256', expect: 'must be 64 hex characters' },
};

type Path = readonly (string | number)[];

const pathText = (path: readonly PropertyKey[]): string =>
  path.map((s, i) => (typeof s === 'number' ? `[${s}]` : i === 0 ? String(s) : `.${String(s)}`)).join('');

function valueAt(data: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = data;
  for (const seg of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[seg];
  }
  return v;
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** `2026-02-09T16:10:30Z` -> `20260209-161030Z`, or null when not a real UTC time. */
export function utcStamp(ts: string): string | null {
  const m = TIMESTAMP_RE.exec(ts);
  if (!m) return null;
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const t = new Date(Date.UTC(y, mo - 1, d, h, mi, s));
  const real = t.getUTCFullYear() === y && t.getUTCMonth() === mo - 1 && t.getUTCDate() === d && t.getUTCHours() === h && t.getUTCMinutes() === mi && t.getUTCSeconds() === s;
  return real ? `${m[1]}${m[2]}${m[3]}-${m[4]}${m[5]}${m[6]}Z` : null;
}

/** `20260209-160501Z` is a real time. */
function isRealStamp(date: string, time: string): boolean {
  const iso = `${date.slice(0, 4)}-${date.slice(4, 6)}-${date.slice(6, 8)}T${time.slice(0, 2)}:${time.slice(2, 4)}:${time.slice(4, 6)}Z`;
  return utcStamp(iso) !== null;
}

type Report = (code: ToolResultCode, message: string, path: Path) => void;

/** A lowercase digest for an uppercase one (reported); anything else unchanged. */
function lowerSha(v: unknown, path: Path, report: Report): unknown {
  if (typeof v !== 'string' || !ANY_CASE_SHA256.test(v) || v === v.toLowerCase()) return v;
  report('TS_SHA256_CASE', `\`${pathText(path)}\` is written in uppercase; Airlock writes and compares digests in lowercase`, path);
  return v.toLowerCase();
}

/**
 * The front matter as the schema reads it: unknown fields reported and dropped, digests
 * lowercased, a `/out/` prefix taken off artifact paths. Values of the wrong shape pass through
 * unchanged for the schema to report.
 */
function lenient(data: Record<string, unknown>, report: Report): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(data)) {
    if (!FIELDS.has(k)) report('TS_FIELD_UNKNOWN', `field \`${k.slice(0, 80)}\` is not in the spec; it is left out of the parsed result`, [k]);
    else out[k] = SHA_FIELDS.includes(k) ? lowerSha(v, [k], report) : v;
  }
  if (Array.isArray(out.artifacts)) {
    out.artifacts = out.artifacts.map((a: unknown, i) => {
      if (!isRecord(a)) return a;
      const item: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(a)) {
        if (!ARTIFACT_FIELDS.has(k)) report('TS_FIELD_UNKNOWN', `field \`artifacts[${i}].${k.slice(0, 80)}\` is not in the spec; it is left out of the parsed result`, ['artifacts', i, k]);
        else if (k === 'sha256') item[k] = lowerSha(v, ['artifacts', i, k], report);
        else item[k] = typeof v === 'string' && v.startsWith('/out/') ? v.slice('/out/'.length) : v;
      }
      return item;
    });
  }
  return out;
}

/** The front matter checked against the schema and the cross-field rules; null when any error was found. */
export function checkFrontMatter(data: unknown, lineOf: (p: Path) => number, fileName: string | undefined, problems: Problem[]): FrontMatter | null {
  const record = data as Record<string, unknown>;
  const report: Report = (code, message, path) => problems.push({ code, message, line: lineOf(path), path: pathText(path) });

  // File name first: it only needs result_id to be a string.
  if (fileName !== undefined) {
    const base = fileName.split(/[\\/]/).pop() ?? fileName;
    const rid = record.result_id;
    if (typeof rid === 'string' && base !== `${rid}.md`) {
      problems.push({ code: 'TS_FILE_NAME', message: `file is named ${JSON.stringify(base.slice(0, 120))}; Airlock names results after result_id: ${JSON.stringify(`${rid.slice(0, 120)}.md`)}`, line: 1 });
    }
  }

  const errorsBefore = problems.length; // warnings found below still leave a usable front matter
  const r = toolResultFrontMatterSchema.safeParse(lenient(record, report));
  if (!r.success) {
    const seen = new Set<string>();
    for (const issue of r.error.issues) {
      const path = issue.path.filter((p): p is string | number => typeof p !== 'symbol');
      const key = pathText(path);
      if (seen.has(key)) continue; // one problem per field
      seen.add(key);
      if (valueAt(data, path) === undefined && path.length > 0 && !OPTIONAL_FIELDS.has(String(path[0]))) {
        report('TS_FIELD_MISSING', `required field \`${key}\` is missing`, path);
        continue;
      }
      const last = [...path].reverse().find((p) => typeof p === 'string') ?? '';
      const rule = FIELD_RULES[path.length > 1 && path[0] === 'artifacts' ? last : String(path[0] ?? '')] ?? { code: 'TS_FIELD_INVALID' as const, expect: 'has a wrong type or value' };
      report(rule.code, `\`${key}\` ${rule.expect}`, path);
    }
    return null;
  }
  const fm = r.data;
  const created = utcStamp(fm.created_utc);
  if (!created) report('TS_TIMESTAMP', `\`created_utc\` ${fm.created_utc} is not a real date and time`, ['created_utc']);
  const req = REQUEST_ID_RE.exec(fm.request_id) as RegExpExecArray;
  if (!isRealStamp(req[1] as string, req[2] as string)) report('TS_REQUEST_ID', '`request_id` carries a date or time that does not exist', ['request_id']);
  else if (created && `${req[1]}-${req[2]}Z` > created) report('TS_TIMESTAMP', '`created_utc` is earlier than the time of the request in request_id; a result comes after its request', ['created_utc']);
  if (created && fm.result_id !== `TS-${created}-${fm.request_id}`) {
    const form = RESULT_ID_RE.test(fm.result_id) ? `TS-${created}-${fm.request_id} (created_utc stamp + request_id)` : `TS-YYYYMMDD-HHMMSSZ-<request_id>, here TS-${created}-${fm.request_id}`;
    report('TS_RESULT_ID_FORM', `\`result_id\` is not in the recommended form ${form}`, ['result_id']);
  }
  if (fm.signal !== undefined && fm.exit_code !== 128 + SIGNALS[fm.signal]) {
    report('TS_EXIT_STATUS', `a process killed by ${fm.signal} reports exit_code ${128 + SIGNALS[fm.signal]} (128 + ${SIGNALS[fm.signal]}), not ${fm.exit_code}`, ['exit_code']);
  }
  if (fm.network_used === 'none' && fm.network_destinations.length > 0) {
    report('TS_NETWORK', '`network_destinations` must be empty when network_used is none', ['network_destinations']);
  }
  if (fm.network_used === 'allowlist' && fm.network_destinations.length === 0) {
    report('TS_NETWORK', '`network_used: allowlist` needs the destinations contacted in network_destinations (use `none` when nothing was contacted)', ['network_destinations']);
  }
  const paths = new Set<string>();
  fm.artifacts.forEach((a, i) => {
    if (paths.has(a.path)) report('TS_ARTIFACT_PATH', 'this artifact path is listed twice; each artifact once', ['artifacts', i, 'path']);
    paths.add(a.path);
  });
  return problems.slice(errorsBefore).some((p) => !TOOL_RESULT_WARNINGS.has(p.code)) ? null : fm;
}
