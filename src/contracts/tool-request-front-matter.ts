import type { Problem } from '../base/problem.js';
import { hasErrorsSince, trProblem, type ToolRequestCode } from './tool-request-rules.js';
import {
  BACKENDS,
  INPUT_NAME_RE,
  LANGUAGES,
  NETWORK_MODES,
  POSITIVE_DECIMAL_RE,
  REQUEST_ID_RE,
  REQUESTED_BY,
  SHA256_RE,
  TIMESTAMP_RE,
  type Backend,
  type Language,
  type NetworkMode,
  type RequestedBy,
  type ToolInput,
  type ToolOutput,
  type ToolRequestFrontMatter,
} from './tool-request-schema.js';

/** What the rest of the document checks need from the front matter, even when part of it is wrong. */
export interface FrontMatterFacts {
  /** The whole normalised front matter, or null when any front matter rule failed. */
  frontMatter: ToolRequestFrontMatter | null;
  language: Language | 'shell_forbidden' | undefined;
  backend: Backend | undefined;
  network: NetworkMode | undefined;
  /** Valid input entries (undefined when `inputs` is not a list). */
  inputs: ToolInput[] | undefined;
  /** Valid, normalised outputs (undefined when `outputs_expected` is not a list). */
  outputs: ToolOutput[] | undefined;
}

const KNOWN_FIELDS = new Set([
  'request_type',
  'schema_version',
  'request_id',
  'created_utc',
  'requested_by',
  'approved_by',
  'approved_utc',
  'purpose',
  'language',
  'backend',
  'network',
  'network_allowlist',
  'cpu_limit',
  'memory_limit_mb',
  'time_limit_sec',
  'inputs',
  'outputs_expected',
  'constraints',
]);

const NON_BLANK = /\S/;
// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
const CONTROL = /[\u0000-\u001f\u007f]/;
const HOSTNAME = /^(?:\*\.)?(?=[a-z0-9-]{1,63}(?:\.|:|$))[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*(?::\d{1,5})?$/i;
const IPV4 = /^(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?$/;
const IPV6 = /^\[[0-9a-f:.]+\](?::\d{1,5})?$/i;
const HTTP_URL = /^https?:\/\/[^\s/@]+(?:\/\S*)?$/i;

/** 400 Gregorian years: exactly 146,097 days. */
const GREGORIAN_CYCLE_MS = 146_097 * 86_400_000;

/** Milliseconds since the epoch of a real instant given as numbers, or null (no 2026-02-30, no 25:00). */
function instantMs(y: number, mo: number, d: number, h: number, mi: number, sec: number, ms = 0): number | null {
  // Arithmetic instead of a Date round trip: this runs three times per request (hot path).
  const leap = (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  const days = mo === 2 ? (leap ? 29 : 28) : mo === 4 || mo === 6 || mo === 9 || mo === 11 ? 30 : 31;
  if (!(mo >= 1 && mo <= 12 && d >= 1 && d <= days && h < 24 && mi < 60 && sec < 60)) return null;
  // Date.UTC reads years 0-99 as 1900-1999: compute 400 years later and shift back.
  return Date.UTC(y + 400, mo - 1, d, h, mi, sec, ms) - GREGORIAN_CYCLE_MS;
}

/** Milliseconds since the epoch of a TIMESTAMP_RE-shaped string that names a real instant, or null. */
export function timestampMs(s: string): number | null {
  const m = TIMESTAMP_RE.exec(s);
  if (!m) return null;
  const dot = s.indexOf('.');
  const ms = dot < 0 ? 0 : Math.round(Number(`0${s.slice(dot, -1)}`) * 1000);
  return instantMs(Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6]), ms);
}

/** `output.json` -> `/out/output.json`; an error message when the path is not a plain path under /out. */
export function normalizeOutputPath(p: string): { path: string } | { error: string } {
  if (p.includes('\\') || CONTROL.test(p)) return { error: 'contains a backslash or a control character' };
  const abs = p.startsWith('/') ? p : `/out/${p}`;
  if (!abs.startsWith('/out/')) return { error: 'is outside /out (only /out/... or a relative path, which means /out/<path>)' };
  const segs = abs.slice(5).split('/');
  if (segs.some((s) => s === '..')) return { error: 'contains a `..` segment' };
  if (segs.some((s) => s === '' || s === '.')) return { error: 'has an empty or `.` segment (name a file such as /out/result.json)' };
  return { path: abs };
}

function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a mapping';
  return `a ${typeof v}`;
}

const quote = (v: unknown): string => (typeof v === 'string' ? JSON.stringify(v.length > 60 ? `${v.slice(0, 60)}…` : v) : typeName(v));

/**
 * Checks every front matter rule, pushing problems, and returns the normalised front matter
 * (null when something failed) plus the facts later checks need.
 */
export function validateFrontMatter(data: Record<string, unknown>, lineOf: (path: readonly (string | number)[]) => number, problems: Problem[]): FrontMatterFacts {
  const start = problems.length;
  const report = (code: ToolRequestCode, message: string, path: (string | number)[]): void => {
    problems.push(trProblem(code, message, lineOf(path), path.map((s) => (typeof s === 'number' ? `[${s}]` : s)).join('.').replace(/\.\[/g, '[')));
  };
  const has = (k: string): boolean => Object.prototype.hasOwnProperty.call(data, k);

  for (const key of Object.keys(data)) {
    if (!KNOWN_FIELDS.has(key)) report('TR_FIELD_UNKNOWN', `unknown front matter field ${quote(key)}; remove it or fix its spelling`, [key]);
  }

  const requiredString = (key: string, emptyCode: ToolRequestCode = 'TR_FIELD_EMPTY'): string | undefined => {
    if (!has(key) || data[key] === null) {
      report(key === 'purpose' ? 'TR_FIELD_MISSING' : emptyCode, `\`${key}\` is required`, [key]);
      return undefined;
    }
    const v = data[key];
    if (typeof v !== 'string') {
      report('TR_FIELD_TYPE', `\`${key}\` must be a string, not ${typeName(v)}`, [key]);
      return undefined;
    }
    if (!NON_BLANK.test(v)) {
      report(emptyCode, `\`${key}\` must not be empty`, [key]);
      return undefined;
    }
    return v;
  };
  const enumField = <T extends string>(key: string, allowed: readonly T[], missingCode: ToolRequestCode, dflt?: T): T | undefined => {
    if (!has(key) || data[key] === null) {
      if (dflt !== undefined) return dflt;
      report(missingCode, `\`${key}\` is required (one of ${allowed.join(', ')})`, [key]);
      return undefined;
    }
    const v = data[key];
    if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v)) {
      report('TR_ENUM', `\`${key}\` is ${quote(v)}; it must be one of ${allowed.join(', ')}`, [key]);
      return undefined;
    }
    return v as T;
  };
  /** The field and its instant (ms), or undefined after reporting why not. */
  const timestampField = (key: string, missingCode: ToolRequestCode): { text: string; ms: number } | undefined => {
    const v = requiredString(key, missingCode);
    if (v === undefined) return undefined;
    const ms = timestampMs(v);
    if (ms === null) {
      report('TR_TIMESTAMP', `\`${key}\` is ${quote(v)}; write a real UTC time like 2026-02-09T16:05:01Z`, [key]);
      return undefined;
    }
    return { text: v, ms };
  };
  const list = (key: string): unknown[] | undefined => {
    if (!has(key) || data[key] === null) {
      report('TR_FIELD_MISSING', `\`${key}\` is required (a list; [] if there are none)`, [key]);
      return undefined;
    }
    const v = data[key];
    if (!Array.isArray(v)) {
      report('TR_FIELD_TYPE', `\`${key}\` must be a list, not ${typeName(v)}`, [key]);
      return undefined;
    }
    return v;
  };

  // Identity and type.
  if (!has('request_type')) report('TR_FIELD_MISSING', '`request_type` is required (tool_request)', ['request_type']);
  else if (data.request_type !== 'tool_request') report('TR_REQUEST_TYPE', `\`request_type\` is ${quote(data.request_type)}; it must be tool_request`, ['request_type']);
  if (!has('schema_version')) report('TR_FIELD_MISSING', '`schema_version` is required (1)', ['schema_version']);
  else if (data.schema_version !== 1) report('TR_SCHEMA_VERSION', `\`schema_version\` is ${JSON.stringify(data.schema_version) ?? 'empty'}; Airlock reads version 1`, ['schema_version']);

  let requestId = requiredString('request_id', 'TR_FIELD_MISSING');
  if (requestId !== undefined) {
    const m = REQUEST_ID_RE.exec(requestId);
    const digits = (i: 1 | 2, from: number, to: number): number => Number(m![i]!.slice(from, to));
    const realTime = m && instantMs(digits(1, 0, 4), digits(1, 4, 6), digits(1, 6, 8), digits(2, 0, 2), digits(2, 2, 4), digits(2, 4, 6)) !== null;
    if (!realTime) {
      report('TR_REQUEST_ID', `\`request_id\` is ${quote(requestId)}; it must look like TR-20260209-160501Z-python-stats (a real time, a lowercase slug)`, ['request_id']);
      requestId = undefined;
    }
  }
  const created = timestampField('created_utc', 'TR_FIELD_MISSING');
  const createdUtc = created?.text;
  if (requestId !== undefined && createdUtc !== undefined) {
    const idTime = requestId.slice(3, 19); // YYYYMMDD-HHMMSSZ
    const want = `${createdUtc.slice(0, 4)}${createdUtc.slice(5, 7)}${createdUtc.slice(8, 10)}-${createdUtc.slice(11, 13)}${createdUtc.slice(14, 16)}${createdUtc.slice(17, 19)}Z`;
    if (idTime !== want) report('TR_ID_TIME', `\`request_id\` carries ${idTime} but created_utc is ${createdUtc}; the id must start with TR-${want}`, ['request_id']);
  }

  // Approval gate.
  const requestedBy = enumField<RequestedBy>('requested_by', REQUESTED_BY, 'TR_APPROVAL');
  const approvedBy = requiredString('approved_by', 'TR_APPROVAL');
  const approved = timestampField('approved_utc', 'TR_APPROVAL');
  const approvedUtc = approved?.text;
  if (created && approved && approved.ms < created.ms) {
    report('TR_APPROVAL_ORDER', `approved_utc ${approvedUtc} is before created_utc ${createdUtc}`, ['approved_utc']);
  }
  const purpose = requiredString('purpose');

  // Language, backend, network.
  let language = enumField('language', LANGUAGES, 'TR_FIELD_MISSING');
  if (language === 'shell_forbidden') {
    report('TR_LANGUAGE_SHELL', '`language: shell_forbidden` is never run: shell is a forbidden language', ['language']);
  }
  const backend = enumField<Backend>('backend', BACKENDS, 'TR_FIELD_MISSING', 'ns');
  const network = enumField<NetworkMode>('network', NETWORK_MODES, 'TR_FIELD_MISSING', 'none');
  if (backend === 'monty' && language !== undefined && language !== 'python') {
    report('TR_BACKEND', `backend monty runs Python only; language is ${language}`, ['backend']);
  }
  if (backend === 'monty' && network === 'allowlist') {
    report('TR_BACKEND', 'backend monty has no network; use network: none or backend ns', ['backend']);
  }

  let allowlist: string[] | undefined = [];
  if (has('network_allowlist') && data.network_allowlist !== null) {
    const v = data.network_allowlist;
    if (!Array.isArray(v)) {
      report('TR_FIELD_TYPE', `\`network_allowlist\` must be a list of hosts, not ${typeName(v)}`, ['network_allowlist']);
      allowlist = undefined;
    } else {
      v.forEach((h, i) => {
        if (typeof h !== 'string') {
          report('TR_FIELD_TYPE', `network_allowlist[${i}] must be a string, not ${typeName(h)}`, ['network_allowlist', i]);
          allowlist = undefined;
        } else if (!(HOSTNAME.test(h) || IPV4.test(h) || IPV6.test(h) || HTTP_URL.test(h))) {
          report('TR_NETWORK_HOST', `network_allowlist[${i}] ${quote(h)} is not a host, host:port, IP or http(s) URL`, ['network_allowlist', i]);
        }
      });
      if (allowlist !== undefined) allowlist = v as string[];
    }
  }
  if (allowlist !== undefined && network === 'none' && allowlist.length > 0) {
    report('TR_NETWORK_ALLOWLIST', 'network_allowlist lists hosts but network is none; set network: allowlist or empty the list', ['network_allowlist']);
  }
  if (allowlist !== undefined && network === 'allowlist' && allowlist.length === 0) {
    report('TR_NETWORK_ALLOWLIST', 'network is allowlist but network_allowlist is empty; list the hosts or set network: none', [has('network_allowlist') ? 'network_allowlist' : 'network']);
  }

  // Limits.
  let cpu: number | undefined;
  if (!has('cpu_limit') || data.cpu_limit === null) report('TR_FIELD_MISSING', '`cpu_limit` is required (cores, e.g. "2")', ['cpu_limit']);
  else {
    const v = data.cpu_limit;
    if (typeof v === 'number') cpu = v;
    else if (typeof v === 'string' && POSITIVE_DECIMAL_RE.test(v)) cpu = Number(v);
    else if (typeof v !== 'string') report('TR_FIELD_TYPE', `\`cpu_limit\` must be a number of cores, not ${typeName(v)}`, ['cpu_limit']);
    if (cpu === undefined || !Number.isFinite(cpu) || cpu <= 0) {
      if (typeof v === 'number' || typeof v === 'string') report('TR_LIMIT', `\`cpu_limit\` is ${quote(v)}; it must be a positive number of cores like "2" or "0.5"`, ['cpu_limit']);
      cpu = undefined;
    }
  }
  const intLimit = (key: string): number | undefined => {
    if (!has(key) || data[key] === null) {
      report('TR_FIELD_MISSING', `\`${key}\` is required (a positive integer)`, [key]);
      return undefined;
    }
    const v = data[key];
    if (typeof v !== 'number') {
      report('TR_FIELD_TYPE', `\`${key}\` must be an integer, not ${typeName(v)}`, [key]);
      return undefined;
    }
    if (!Number.isSafeInteger(v) || v <= 0) {
      report('TR_LIMIT', `\`${key}\` is ${v}; it must be a positive integer`, [key]);
      return undefined;
    }
    return v;
  };
  const memory = intLimit('memory_limit_mb');
  const time = intLimit('time_limit_sec');

  // Inputs.
  let inputs: ToolInput[] | undefined;
  const rawInputs = list('inputs');
  if (rawInputs) {
    inputs = [];
    const seen = new Set<string>();
    rawInputs.forEach((item, i) => {
      if (item === null || typeof item !== 'object' || Array.isArray(item)) {
        report('TR_FIELD_TYPE', `inputs[${i}] must be a mapping with name and sha256, not ${typeName(item)}`, ['inputs', i]);
        return;
      }
      const rec = item as Record<string, unknown>;
      for (const k of Object.keys(rec)) if (k !== 'name' && k !== 'sha256') report('TR_FIELD_UNKNOWN', `inputs[${i}] has unknown field ${quote(k)} (only name and sha256)`, ['inputs', i, k]);
      let ok = true;
      const name = rec.name;
      if (typeof name !== 'string') {
        report(name === undefined || name === null ? 'TR_FIELD_MISSING' : 'TR_FIELD_TYPE', `inputs[${i}].name must be a file name string`, ['inputs', i]);
        ok = false;
      } else if (!INPUT_NAME_RE.test(name)) {
        report('TR_INPUT_NAME', `inputs[${i}].name ${quote(name)} is not a plain file name (no slashes or .., not starting with -)`, ['inputs', i, 'name']);
        ok = false;
      } else if (seen.has(name)) {
        report('TR_INPUT_DUPLICATE', `input ${quote(name)} is declared twice`, ['inputs', i, 'name']);
        ok = false;
      } else seen.add(name);
      const sha = rec.sha256;
      if (typeof sha !== 'string' || !SHA256_RE.test(sha)) {
        const what = sha === undefined || sha === null || sha === '' ? 'has no sha256' : `sha256 ${typeof sha === 'string' && /^[0-9a-fA-F]{64}$/.test(sha) ? 'must be lowercase' : 'is not 64 hex digits'}`;
        report('TR_INPUT_SHA256', `inputs[${i}] ${what}; the approval covers inputs by hash`, ['inputs', i]);
        ok = false;
      }
      if (ok) inputs!.push({ name: name as string, sha256: sha as string, path: `/in/${name as string}` });
    });
  }

  // Outputs.
  let outputs: ToolOutput[] | undefined;
  const rawOutputs = list('outputs_expected');
  if (rawOutputs) {
    outputs = [];
    const seen = new Set<string>();
    rawOutputs.forEach((item, i) => {
      if (item === null || typeof item !== 'object' || Array.isArray(item)) {
        report('TR_FIELD_TYPE', `outputs_expected[${i}] must be a mapping with path and description, not ${typeName(item)}`, ['outputs_expected', i]);
        return;
      }
      const rec = item as Record<string, unknown>;
      for (const k of Object.keys(rec)) {
        if (k !== 'path' && k !== 'description') report('TR_FIELD_UNKNOWN', `outputs_expected[${i}] has unknown field ${quote(k)} (only path and description)`, ['outputs_expected', i, k]);
      }
      let ok = true;
      let path: string | undefined;
      if (typeof rec.path !== 'string' || rec.path === '') {
        report(rec.path === undefined || rec.path === null ? 'TR_FIELD_MISSING' : 'TR_FIELD_TYPE', `outputs_expected[${i}].path must be a path string`, ['outputs_expected', i]);
        ok = false;
      } else {
        const norm = normalizeOutputPath(rec.path);
        if ('error' in norm) {
          report('TR_OUTPUT_PATH', `outputs_expected[${i}].path ${quote(rec.path)} ${norm.error}`, ['outputs_expected', i, 'path']);
          ok = false;
        } else if (seen.has(norm.path)) {
          report('TR_OUTPUT_DUPLICATE', `output ${norm.path} is declared twice (read once)`, ['outputs_expected', i, 'path']);
          ok = false; // the first declaration stands
        } else {
          seen.add(norm.path);
          path = norm.path;
        }
      }
      const d = rec.description;
      if (d === undefined || d === null) {
        report('TR_FIELD_MISSING', `outputs_expected[${i}].description is required`, ['outputs_expected', i]);
        ok = false;
      } else if (typeof d !== 'string') {
        report('TR_FIELD_TYPE', `outputs_expected[${i}].description must be a string, not ${typeName(d)}`, ['outputs_expected', i, 'description']);
        ok = false;
      } else if (!NON_BLANK.test(d)) {
        report('TR_FIELD_EMPTY', `outputs_expected[${i}].description must not be empty`, ['outputs_expected', i, 'description']);
        ok = false;
      }
      if (ok && path !== undefined) outputs!.push({ path, description: d as string });
    });
  }

  // Constraints.
  const rawConstraints = list('constraints');
  rawConstraints?.forEach((c, i) => {
    if (typeof c !== 'string') report('TR_FIELD_TYPE', `constraints[${i}] must be a string, not ${typeName(c)}`, ['constraints', i]);
    else if (!NON_BLANK.test(c)) report('TR_FIELD_EMPTY', `constraints[${i}] must not be empty`, ['constraints', i]);
  });

  const facts: FrontMatterFacts = { frontMatter: null, language, backend, network, inputs, outputs };
  if (!hasErrorsSince(problems, start)) {
    if (language === 'shell_forbidden') language = undefined; // unreachable: it was reported
    facts.frontMatter = {
      request_type: 'tool_request',
      schema_version: 1,
      request_id: requestId as string,
      created_utc: createdUtc as string,
      requested_by: requestedBy as RequestedBy,
      approved_by: approvedBy as string,
      approved_utc: approvedUtc as string,
      purpose: purpose as string,
      language: language as Language,
      backend: backend as Backend,
      network: network as NetworkMode,
      network_allowlist: [...(allowlist as string[])],
      cpu_limit: cpu as number,
      memory_limit_mb: memory as number,
      time_limit_sec: time as number,
      inputs: (inputs as ToolInput[]).map(({ name, sha256 }) => ({ name, sha256 })),
      outputs_expected: (rawOutputs as { path: string; description: string }[]).map(({ path, description }) => ({ path, description })),
      constraints: [...(rawConstraints as string[])],
    };
  }
  return facts;
}
