import { createHash } from 'node:crypto';

/**
 * What an operator signs to approve one UTP call: the exact call, as canonical bytes. A worker
 * builds it from the call it is about to run (its command, its tool.call card's arguments, the tool
 * registration it loaded), never from the approval row, so a row changed in the store (other
 * arguments shown to the operator, another call's id) gives other bytes and the signature fails.
 * The approval id is in the bytes: a signature approves one approval of one call, once.
 */
export interface UtpCallApproval {
  approval_id: string;
  project_id: string;
  tool_name: string;
  /** The command's subject (the tool's target_subject). */
  subject: string;
  agent_id: string;
  agent_turn_id: string;
  turn_epoch: number;
  tool_call_id: string;
  tool_call_card_id: string;
  /** The arguments from the tool.call card (JSON). */
  arguments: unknown;
  /** sha256 of the tool's registration as the worker loaded it (description, parameters, options, subject): the approval covers how it runs. */
  tool_sha256: string;
}

const KEYS: readonly (keyof UtpCallApproval)[] = ['approval_id', 'project_id', 'tool_name', 'subject', 'agent_id', 'agent_turn_id', 'turn_epoch', 'tool_call_id', 'tool_call_card_id', 'arguments', 'tool_sha256'];

/** Canonical JSON of parsed JSON data: keys sorted, no whitespace (the values come from JSON, so they are plain). */
export function canonical(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .filter((k) => o[k] !== undefined)
    .map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`)
    .join(',')}}`;
}

/** The bytes an operator signs (signApproval with request id = approval_id) and a worker verifies. */
export function utpCallBytes(c: UtpCallApproval): Buffer {
  const only = Object.fromEntries(KEYS.map((k) => [k, c[k]]));
  return Buffer.from(`airlock-utp-call-v1\n${canonical(only)}\n`);
}

export function toolSha256(tool: { project_id: string; tool_name: string; description: string; parameters: unknown; target_subject: string; after_execution: string; options: unknown }): string {
  const t = { project_id: tool.project_id, tool_name: tool.tool_name, description: tool.description, parameters: tool.parameters, target_subject: tool.target_subject, after_execution: tool.after_execution, options: tool.options };
  return createHash('sha256').update(canonical(t)).digest('hex');
}

/** Reads the call an approval row asks about (`summary.call`); undefined when the row has none or it is malformed. */
export function callOfSummary(summary: Record<string, unknown>): UtpCallApproval | undefined {
  const c = summary.call;
  if (c === null || typeof c !== 'object' || Array.isArray(c)) return undefined;
  const x = c as Record<string, unknown>;
  const str = (k: string) => typeof x[k] === 'string';
  if (!['approval_id', 'project_id', 'tool_name', 'subject', 'agent_id', 'agent_turn_id', 'tool_call_id', 'tool_call_card_id', 'tool_sha256'].every(str)) return undefined;
  if (typeof x.turn_epoch !== 'number' || !('arguments' in x)) return undefined;
  return x as unknown as UtpCallApproval;
}
