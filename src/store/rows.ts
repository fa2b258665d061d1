import type { ApprovalRecord, ApprovalState, ClaimRecord, InboxReport, ToolRecord, WakeupRecord } from './types.js';

/** A database row as both drivers return it (SQLite: TEXT JSON and integers; PostgreSQL: jsonb objects and int8 strings). */
export type Row = Record<string, unknown>;

const json = <T>(v: unknown): T => (typeof v === 'string' ? (JSON.parse(v) as T) : (v as T));
const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));
const str = (v: unknown): string => String(v);
const strOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));

/** JSON text as a client may have written it into SQLite: unparseable text stays a string, which the tool checks refuse. */
const jsonOrText = (v: unknown): Record<string, unknown> => {
  try {
    return json<Record<string, unknown>>(v);
  } catch {
    return v as Record<string, unknown>;
  }
};

export function rowToTool(r: Row): ToolRecord {
  return {
    project_id: str(r.project_id),
    tool_name: str(r.tool_name),
    description: str(r.description),
    parameters: jsonOrText(r.parameters),
    target_subject: str(r.target_subject),
    after_execution: str(r.after_execution) as ToolRecord['after_execution'],
    options: jsonOrText(r.options),
    signature: r.signature === null || r.signature === undefined ? null : str(r.signature),
  };
}

export function rowToClaim(r: Row): ClaimRecord {
  return {
    agent_turn_id: str(r.agent_turn_id),
    tool_call_id: str(r.tool_call_id),
    tool_call_card_id: strOrNull(r.tool_call_card_id),
    context: r.context === null || r.context === undefined ? null : json<Record<string, unknown>>(r.context),
    worker_id: str(r.worker_id),
    state: str(r.state) as ClaimRecord['state'],
    lease_until: num(r.lease_until),
    cancel_requested: r.cancel_requested === true || num(r.cancel_requested) === 1,
    result_card_id: strOrNull(r.result_card_id),
    wakeup: r.wakeup === null || r.wakeup === undefined ? null : json<WakeupRecord>(r.wakeup),
    woken: r.woken === true || num(r.woken) === 1,
    created_at: num(r.created_at),
    updated_at: num(r.updated_at),
  };
}

export function rowToInbox(r: Row): InboxReport {
  return {
    id: num(r.id),
    agent_id: str(r.agent_id),
    agent_turn_id: str(r.agent_turn_id),
    tool_call_id: str(r.tool_call_id),
    kind: str(r.kind),
    payload: json<Record<string, unknown>>(r.payload),
    created_at: num(r.created_at),
  };
}

export function rowToApproval(r: Row): ApprovalRecord {
  return {
    id: str(r.id),
    agent_turn_id: str(r.agent_turn_id),
    tool_call_id: str(r.tool_call_id),
    project_id: str(r.project_id),
    tool_name: str(r.tool_name),
    summary: json<Record<string, unknown>>(r.summary),
    state: str(r.state) as ApprovalState,
    decided_by: strOrNull(r.decided_by),
    reason: strOrNull(r.reason),
    signature: strOrNull(r.signature),
    created_at: num(r.created_at),
    expires_at: num(r.expires_at),
    decided_at: r.decided_at === null || r.decided_at === undefined ? null : num(r.decided_at),
  };
}
