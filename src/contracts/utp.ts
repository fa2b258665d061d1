import { detectKind, readJsonOnce } from './detect.js';
import type { Contract, Rule } from './problem.js';
import type { Result } from '../base/problem.js';
import { CALL_CONTENT_KEYS, CARD_KEYS, cardRules, METADATA_KEYS, readCard, RESULT_CONTENT_KEYS, type UtpCard } from './utp-card.js';
import {
  callbackPayload,
  commandPayload,
  commandRules,
  parseCallbackMessage,
  parseToolCommand,
  type PmoCommand,
  type ToolCallback,
  type ToolServiceCommand,
} from './utp-command.js';
import { commonRules, isRecord, own, Sink } from './utp-common.js';
import { checkRouteHeaders, identityRules, type UtpHeaders } from './utp-identity.js';
import { utpSchemas } from './utp-schemas.js';
import { parseSubject, subjectRules, type SubjectRoute } from './utp-subject.js';
import { traceRules } from './utp-trace.js';

/**
 * UTP messages as files for `airlock check` (spec: /work/shared/specs/utp-tool-protocol.zh.md).
 * A UTP file is a `.json` file with a top-level `utp` key naming what it holds:
 *
 *   { "utp": "tool_command", "subject": "cg.v1.p.c.cmd.tool.x", "headers": {...}?, "payload": {...} }
 *   { "utp": "pmo_command",  "subject": "cg.v1.p.c.cmd.sys.pmo.internal.x", "headers"?, "payload" }
 *   { "utp": "callback", "headers"?, "wakeup_subject"?: "cg.v1.p.c.cmd.agent.x.wakeup", "payload" }
 *   { "utp": "card", "card": { card_id, type, created_at, content, metadata? } }
 *
 * The envelope is Airlock's own format and is closed (an unknown envelope key is UTP_DOC_SHAPE);
 * the payloads inside are open, as the spec requires. The NATS service calls the payload parsers
 * (parseToolCommand, parseCallback, parseCard, ...) directly on decoded messages.
 */

export * from './utp-card.js';
export * from './utp-command.js';
export { AFTER_EXECUTION, TOOL_STATUS, ID_PATTERN, MAX_ID_LENGTH, type AfterExecution, type ToolStatus, type JsonValue, type JsonObject } from './utp-common.js';
export * from './utp-identity.js';
export * from './utp-subject.js';
export * from './utp-trace.js';

export interface ToolCommandDocument {
  utp: 'tool_command';
  subject: string;
  route: SubjectRoute;
  headers: UtpHeaders;
  command: ToolServiceCommand;
}
export interface PmoCommandDocument {
  utp: 'pmo_command';
  subject: string;
  route: SubjectRoute;
  headers: UtpHeaders;
  command: PmoCommand;
}
export interface CallbackDocument {
  utp: 'callback';
  headers: UtpHeaders;
  callback: ToolCallback;
  /** The cmd.agent.<target>.wakeup subject the report triggers, when the file names it. */
  wakeup?: { subject: string; route: SubjectRoute };
}
export interface CardDocument {
  utp: 'card';
  card: UtpCard;
}
export type UtpDocument = ToolCommandDocument | PmoCommandDocument | CallbackDocument | CardDocument;

export const UTP_DOCUMENT_KINDS = ['tool_command', 'pmo_command', 'callback', 'card'] as const;
const ENVELOPE: Record<UtpDocument['utp'], { required: string[]; optional: string[] }> = {
  tool_command: { required: ['subject', 'payload'], optional: ['headers'] },
  pmo_command: { required: ['subject', 'payload'], optional: ['headers'] },
  callback: { required: ['payload'], optional: ['headers', 'wakeup_subject'] },
  card: { required: ['card'], optional: [] },
};

export const documentRules = [
  {
    code: 'UTP_DOC_SHAPE',
    spec: 'Airlock: a UTP file is a JSON object whose `utp` is tool_command | pmo_command | callback | card, with exactly the envelope keys of that kind (commands: subject, payload, headers?; callback: payload, headers?, wakeup_subject?; card: card).',
    fix: 'Wrap the message as `{ "utp": "tool_command", "subject": "...", "headers": {...}, "payload": {...} }` (see docs/utp.md); remove misspelt envelope keys.',
  },
] as const;

export const utpRules: readonly Rule[] = [...documentRules, ...commonRules, ...subjectRules, ...identityRules, ...traceRules, ...commandRules, ...cardRules];


const detect = (fileName: string, text: string): boolean => detectKind(fileName, text) === 'utp';

function parse(text: string): Result<UtpDocument> {
  const doc = readJsonOnce(text);
  if (!doc.ok) return doc;
  const sink = new Sink(doc.value.lineOf);
  const data = doc.value.data;
  if (!isRecord(data)) {
    sink.add('UTP_DOC_SHAPE', 'a UTP file is a JSON object with a top-level `utp` key', []);
    return { ok: false, problems: sink.problems };
  }
  const kind = own(data, 'utp');
  if (typeof kind !== 'string' || !(UTP_DOCUMENT_KINDS as readonly string[]).includes(kind)) {
    sink.add('UTP_DOC_SHAPE', `\`utp\` must be one of ${UTP_DOCUMENT_KINDS.join(' | ')}`, ['utp']);
    return { ok: false, problems: sink.problems };
  }
  const utp = kind as UtpDocument['utp'];
  const env = ENVELOPE[utp];
  for (const k of Object.keys(data)) {
    if (k !== 'utp' && !env.required.includes(k) && !env.optional.includes(k)) {
      sink.add('UTP_DOC_SHAPE', `\`${k.slice(0, 60)}\` is not a key of a ${utp} file (allowed: utp, ${[...env.required, ...env.optional].join(', ')})`, [k]);
    }
  }
  for (const k of env.required) if (own(data, k) === undefined) sink.add('UTP_DOC_SHAPE', `a ${utp} file needs \`${k}\``, [k]);
  if (sink.problems.length > 0) return { ok: false, problems: sink.problems };

  const at = { payload: ['payload'], headers: ['headers'], subject: ['subject'] };
  if (utp === 'tool_command' || utp === 'pmo_command') {
    const form = utp === 'pmo_command' ? 'pmo' : 'tool';
    const r = parseToolCommand(own(data, 'subject'), own(data, 'payload'), own(data, 'headers'), { form, at, sink });
    if (!r.ok) return { ok: false, problems: sink.problems };
    return { ok: true, value: { utp, ...r.value } as ToolCommandDocument | PmoCommandDocument };
  }
  if (utp === 'callback') {
    let wakeup: CallbackDocument['wakeup'];
    const ws = own(data, 'wakeup_subject');
    if (ws !== undefined) {
      const route = parseSubject(ws);
      if (!route.ok) for (const p of route.problems) sink.add(p.code, p.message, ['wakeup_subject']);
      else if (route.value.kind !== 'wakeup') sink.add('UTP_FORM_MISMATCH', 'wakeup_subject must be cg.<ver>.<project_id>.<channel_id>.cmd.agent.<target>.wakeup', ['wakeup_subject']);
      else wakeup = { subject: ws as string, route: route.value };
    }
    const r = parseCallbackMessage(own(data, 'payload'), own(data, 'headers'), { at, sink });
    if (r.ok && wakeup) checkRouteHeaders(r.value.headers, wakeup.route, sink, at.headers);
    if (!r.ok || sink.problems.length > 0) return { ok: false, problems: sink.problems };
    const value: CallbackDocument = { utp, headers: r.value.headers, callback: r.value.callback };
    if (wakeup) value.wakeup = wakeup;
    return { ok: true, value };
  }
  const card = readCard(own(data, 'card'), sink, ['card']);
  if (!card || sink.problems.length > 0) return { ok: false, problems: sink.problems };
  return { ok: true, value: { utp, card } };
}

/** Copies `keys` of `src` that are set, in that order (stable output). */
function ordered(src: object, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of keys) {
    const v = (src as Record<string, unknown>)[k];
    if (v !== undefined) out[k] = v;
  }
  return out;
}

export function cardObject(card: UtpCard): Record<string, unknown> {
  const content = ordered(card.content, card.type === 'tool.call' ? CALL_CONTENT_KEYS : RESULT_CONTENT_KEYS);
  const out = ordered({ ...card, content }, CARD_KEYS);
  if (card.metadata) out.metadata = ordered(card.metadata, METADATA_KEYS);
  return out;
}

function render(doc: UtpDocument): string {
  let out: Record<string, unknown>;
  const headers = (h: UtpHeaders) => (Object.keys(h).length > 0 ? { headers: h } : {});
  if (doc.utp === 'tool_command' || doc.utp === 'pmo_command') {
    out = { utp: doc.utp, subject: doc.subject, ...headers(doc.headers), payload: commandPayload(doc.command) };
  } else if (doc.utp === 'callback') {
    out = { utp: doc.utp, ...headers(doc.headers), ...(doc.wakeup ? { wakeup_subject: doc.wakeup.subject } : {}), payload: callbackPayload(doc.callback) };
  } else out = { utp: doc.utp, card: cardObject(doc.card) };
  return `${JSON.stringify(out, null, 2)}\n`;
}

export const utpContract: Contract<UtpDocument> = {
  kind: 'utp',
  detect,
  parse: (text) => parse(text),
  render,
  rules: utpRules,
  schemas: utpSchemas,
};
