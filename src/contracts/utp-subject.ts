import type { Problem, Result } from '../base/problem.js';

/**
 * The UTP subject grammar (spec section 4.1/4.2) over NATS subjects.
 *
 *   tool    cg.<ver>.<project_id>.<channel_id>.cmd.tool.<target>[.<more>...]
 *   pmo     cg.<ver>.<project_id>.<channel_id>.cmd.sys.pmo.internal.<tool>
 *   wakeup  cg.<ver>.<project_id>.<channel_id>.cmd.agent.<target>.wakeup
 *
 * Airlock's token rules (stricter than NATS, which only forbids empty tokens, whitespace and
 * wildcards in published subjects): every token is 1..128 characters of `[A-Za-z0-9_-]`, so no
 * `*`/`>` wildcards, no whitespace, no `$` (NATS system prefixes), no non-ASCII, nothing that a
 * shell, a log line or a JetStream filter could read differently. `<ver>` is `v` + a digit +
 * letters/digits (`v1`, `v1r3`). A whole subject is at most 512 characters.
 */

export type SubjectKind = 'tool' | 'pmo' | 'wakeup';

export interface SubjectRoute {
  ver: string;
  projectId: string;
  channelId: string;
  kind: SubjectKind;
  /** tool: the first token after `cmd.tool`; pmo: the `<tool>`; wakeup: the agent target. */
  target: string;
  /** tool: the tokens after `<target>` (may be empty); pmo and wakeup: always empty. */
  rest: string[];
}

export const MAX_SUBJECT_LENGTH = 512;
export const MAX_TOKEN_LENGTH = 128;
export const SUBJECT_TOKEN = /^[A-Za-z0-9_-]{1,128}$/;
export const SUBJECT_VERSION = /^v[0-9][A-Za-z0-9]*$/;

export const subjectRules = [
  {
    code: 'UTP_SUBJECT_SYNTAX',
    spec: 'NATS subject rules, Airlock-strict: dot-separated tokens, none empty, each 1..128 of [A-Za-z0-9_-] (no whitespace, no `*`/`>` wildcards, printable ASCII only), at most 512 characters.',
    fix: 'Build the subject from plain tokens (letters, digits, `_`, `-`) joined by single dots, with no leading, trailing or doubled dot.',
  },
  {
    code: 'UTP_SUBJECT_FORM',
    spec: 'UTP 4.1/4.2: a subject is `cg.<ver>.<project_id>.<channel_id>.cmd.tool.<target>...`, `cg.<ver>.<project_id>.<channel_id>.cmd.sys.pmo.internal.<tool>` or `cg.<ver>.<project_id>.<channel_id>.cmd.agent.<target>.wakeup`.',
    fix: 'Use one of the three UTP subject forms exactly; `<ver>` looks like `v1`.',
  },
] as const;

const problem = (code: string, message: string): Problem => ({ code, message });

/** A subject whose every token is valid: checked in one pass (the common case, on every call). */
const VALID_SUBJECT = /^[A-Za-z0-9_-]{1,128}(?:\.[A-Za-z0-9_-]{1,128})*$/;

/** Checks NATS/Airlock token rules and splits; never echoes the subject itself (it is input). */
function tokenize(subject: unknown): Result<string[]> {
  if (typeof subject !== 'string') return { ok: false, problems: [problem('UTP_FIELD_TYPE', 'subject must be a string')] };
  if (subject.length === 0) return { ok: false, problems: [problem('UTP_SUBJECT_SYNTAX', 'subject is empty')] };
  if (subject.length > MAX_SUBJECT_LENGTH) {
    return { ok: false, problems: [problem('UTP_SUBJECT_SYNTAX', `subject is ${subject.length} characters; the limit is ${MAX_SUBJECT_LENGTH}`)] };
  }
  if (VALID_SUBJECT.test(subject)) return { ok: true, value: subject.split('.') };
  // Something is wrong: find every bad token and say what is wrong with it.
  const problems: Problem[] = [];
  subject.split('.').forEach((t, i) => {
    const where = `subject token ${i + 1}`;
    if (t === '') problems.push(problem('UTP_SUBJECT_SYNTAX', `${where} is empty (leading, trailing or doubled dot)`));
    else if (t === '*' || t === '>' || t.includes('*') || t.includes('>')) {
      problems.push(problem('UTP_SUBJECT_SYNTAX', `${where} contains a wildcard (\`*\` or \`>\`): a published subject must be concrete`));
    } else if (/\s/.test(t)) problems.push(problem('UTP_SUBJECT_SYNTAX', `${where} contains whitespace`));
    else if (t.length > MAX_TOKEN_LENGTH) problems.push(problem('UTP_SUBJECT_SYNTAX', `${where} is ${t.length} characters; the limit is ${MAX_TOKEN_LENGTH}`));
    else if (!SUBJECT_TOKEN.test(t)) {
      problems.push(problem('UTP_SUBJECT_SYNTAX', `${where} has a character outside [A-Za-z0-9_-] (non-ASCII, control or punctuation)`));
    }
  });
  // Unreachable while VALID_SUBJECT and the checks above agree; fail closed anyway.
  if (problems.length === 0) problems.push(problem('UTP_SUBJECT_SYNTAX', 'subject is not a dot-separated list of [A-Za-z0-9_-] tokens'));
  return { ok: false, problems };
}

const FORMS =
  'expected cg.<ver>.<project_id>.<channel_id>.cmd.tool.<target>..., cg.<ver>.<project_id>.<channel_id>.cmd.sys.pmo.internal.<tool> or cg.<ver>.<project_id>.<channel_id>.cmd.agent.<target>.wakeup';

const form = (message: string): Result<SubjectRoute> => ({ ok: false, problems: [problem('UTP_SUBJECT_FORM', `${message}; ${FORMS}`)] });

/** Parses a published UTP subject into its route. Never throws. */
export function parseSubject(subject: unknown): Result<SubjectRoute> {
  const t = tokenize(subject);
  if (!t.ok) return t;
  const tokens = t.value;
  // Indexed, not destructured with rest elements: this runs several times per call.
  const root = tokens[0], ver = tokens[1], projectId = tokens[2], channelId = tokens[3], cmd = tokens[4];
  if (root !== 'cg') return form('subject must start with `cg.`');
  if (ver === undefined || projectId === undefined || channelId === undefined || cmd === undefined) return form('subject is too short');
  if (!SUBJECT_VERSION.test(ver)) return form('the <ver> token (2nd) must look like `v1`');
  if (cmd !== 'cmd') return form('the 5th token must be `cmd`');
  const area = tokens[5];
  const after = tokens.length - 6;
  if (area === 'tool') {
    const target = tokens[6];
    if (target === undefined) return form('`cmd.tool` must be followed by a <target> token');
    return { ok: true, value: { ver, projectId, channelId, kind: 'tool', target, rest: tokens.slice(7) } };
  }
  if (area === 'sys') {
    if (tokens[6] !== 'pmo' || tokens[7] !== 'internal') return form('`cmd.sys` must continue with `pmo.internal.<tool>`');
    if (after !== 3) return form('`cmd.sys.pmo.internal` must be followed by exactly one <tool> token');
    return { ok: true, value: { ver, projectId, channelId, kind: 'pmo', target: tokens[8] as string, rest: [] } };
  }
  if (area === 'agent') {
    if (after !== 2 || tokens[7] !== 'wakeup') return form('`cmd.agent` must be followed by exactly `<target>.wakeup`');
    return { ok: true, value: { ver, projectId, channelId, kind: 'wakeup', target: tokens[6] as string, rest: [] } };
  }
  return form('after `cmd` comes `tool`, `sys.pmo.internal` or `agent`');
}

/** Renders a route as its subject and checks it with parseSubject (so a built subject always parses back). */
export function buildSubject(route: SubjectRoute): Result<string> {
  const head = ['cg', route.ver, route.projectId, route.channelId, 'cmd'];
  let tokens: string[];
  if (route.kind === 'tool') tokens = [...head, 'tool', route.target, ...route.rest];
  else if (route.kind === 'pmo') tokens = [...head, 'sys', 'pmo', 'internal', route.target];
  else tokens = [...head, 'agent', route.target, 'wakeup'];
  if (route.kind !== 'tool' && route.rest.length > 0) {
    return { ok: false, problems: [problem('UTP_SUBJECT_FORM', `a ${route.kind} subject has no extra tokens after its target`)] };
  }
  // Each route part must be one token: a dot inside would silently make another route.
  const parts = [route.ver, route.projectId, route.channelId, route.target, ...route.rest];
  if (parts.some((x) => typeof x !== 'string' || !SUBJECT_TOKEN.test(x))) {
    return { ok: false, problems: [problem('UTP_SUBJECT_SYNTAX', 'every route part must be a single token of 1..128 characters of [A-Za-z0-9_-]')] };
  }
  const subject = tokens.join('.');
  const back = parseSubject(subject);
  if (!back.ok) return back;
  // A token containing a dot would split into two and parse as another route: refuse it.
  const b = back.value;
  const same =
    b.kind === route.kind && b.ver === route.ver && b.projectId === route.projectId && b.channelId === route.channelId &&
    b.target === route.target && b.rest.length === route.rest.length && b.rest.every((x, i) => x === route.rest[i]);
  if (!same) {
    return { ok: false, problems: [problem('UTP_SUBJECT_SYNTAX', 'a route token contains a dot or is not a single token')] };
  }
  return { ok: true, value: subject };
}

interface RouteBase {
  ver: string;
  projectId: string;
  channelId: string;
}

export const buildToolSubject = (r: RouteBase & { target: string; rest?: string[] }): Result<string> =>
  buildSubject({ ...r, kind: 'tool', rest: r.rest ?? [] });
export const buildPmoSubject = (r: RouteBase & { tool: string }): Result<string> =>
  buildSubject({ ver: r.ver, projectId: r.projectId, channelId: r.channelId, kind: 'pmo', target: r.tool, rest: [] });
export const buildWakeupSubject = (r: RouteBase & { target: string }): Result<string> =>
  buildSubject({ ver: r.ver, projectId: r.projectId, channelId: r.channelId, kind: 'wakeup', target: r.target, rest: [] });
