import { createHash, randomUUID } from 'node:crypto';
import { headers as natsHeaders, type JetStreamClient, type NatsConnection, type Subscription } from 'nats';
import type { Problem } from '../base/problem.js';
import {
  buildWakeupSubject,
  checkCallbackAgainstResultCard,
  commandPayload,
  effectiveAfterExecution,
  parseCallback,
  parseCard,
  parseSubject,
  type AfterExecution,
  type SubjectRoute,
  type JsonObject,
  type ToolCallback,
  type ToolResultCard,
  type ToolResultContent,
  type ToolStatus,
} from '../contracts/utp.js';
import type { Anchor, Store } from '../store/types.js';
import { cancelSubject, defaultToolSubject } from './tools.js';

/**
 * The agent side of a UTP call, for TypeScript agents and for tests:
 * write the tool.call card, publish the command (payload fields AND CG-* headers) on the tool's
 * subject through JetStream, wait for `cmd.agent.<agent_id>.wakeup`, read the tool.result card.
 */

export const clientRules = [
  { code: 'UTPC_BAD_INPUT', spec: 'Airlock client: ids are UTP identifiers, agent_id a subject token (it names the wakeup subject), the subject a cmd.tool subject.', fix: 'Fix the named option.' },
  { code: 'UTPC_PUBLISH', spec: 'Airlock client: the command is published through JetStream (a stream must capture the subject).', fix: 'Start `airlock serve --nats URL` (it creates the stream), and check the subject is a registered target_subject.' },
  { code: 'UTPC_TIMEOUT', spec: 'Airlock client: no wakeup arrived within timeoutMs.', fix: 'Raise timeoutMs, or check that `airlock serve` is running.' },
  { code: 'UTPC_CONNECTION_CLOSED', spec: 'Airlock client: the NATS connection closed while a call waited for its wakeup; the call may still run, or have run.', fix: 'Call again with the same agent_turn_id and tool_call_id on an open connection: the service answers a repeated call from its record, without running it again.' },
  { code: 'UTPC_BAD_ANSWER', spec: 'UTP 4.2: the wakeup carries routing and pointer fields and names a valid tool.result card.', fix: 'A bug on the serving side: report it with the logged problems.' },
] as const;

export interface CallToolOptions {
  nats: NatsConnection;
  /** The card store shared with the service (the tool.call card is written to it). */
  store: Store;
  /** The tool's target_subject; or give project + channel (+ ver, default v1) for the default subject of `tool`. */
  subject?: string;
  project?: string;
  channel?: string;
  ver?: string;
  tool: string;
  agentId: string;
  agentTurnId: string;
  turnEpoch: number;
  toolCallId?: string;
  stepId?: string;
  /** The step that started this one (CommonGround's lineage): on the tool.call card's metadata, copied onto the result's. */
  parentStepId?: string;
  traceId?: string;
  traceparent?: string;
  afterExecution?: AfterExecution;
  arguments: JsonObject;
  timeoutMs?: number;
  /** Where the identity goes: both payload and CG-* headers (default), or only one of them. */
  identityIn?: 'both' | 'payload' | 'headers';
}

export type CallToolOutcome =
  | {
      ok: true;
      toolCallId: string;
      status: ToolStatus;
      /** The tool.result content (result, error). */
      content: ToolResultContent;
      card: ToolResultCard;
      callback: ToolCallback;
      /** after_execution with the `__cg_control` override applied (UTP 3.1). */
      afterExecution: AfterExecution;
      /** The wakeup's traceparent header (a child span of the command's). */
      traceparent?: string;
    }
  | { ok: false; toolCallId: string; problems: Problem[] };

interface Waiter {
  resolve(v: { payload: unknown; headers: Record<string, string> } | 'closed'): void;
}

/**
 * The tool.call card id of a call: derived from its anchor, so a retry of the same call (same
 * agent_turn_id and tool_call_id) names the same card and does not write a second one (UTP 3.2:
 * re-entry with the same tool_call_card_id is idempotent).
 */
export function toolCallCardId(agentTurnId: string, toolCallId: string): string {
  return `card-call-${createHash('sha256').update(`${agentTurnId}\u0000${toolCallId}`).digest('hex').slice(0, 32)}`;
}

const utf8 = new TextDecoder();

/** One core subscription per (connection, wakeup subject), shared by every call that waits on it. */
const routers = new WeakMap<NatsConnection, Map<string, { sub: Subscription; waiters: Map<string, Set<Waiter>> }>>();

function router(nc: NatsConnection, subject: string) {
  let bySubject = routers.get(nc);
  if (!bySubject) {
    const all = (bySubject = new Map());
    routers.set(nc, all);
    // No wakeup can come once the connection is closed: every waiting call ends now, not at its timeout.
    void nc.closed().then(() => {
      for (const r of all.values()) for (const ws of r.waiters.values()) for (const w of ws) w.resolve('closed');
    });
  }
  let r = bySubject.get(subject);
  if (r) return r;
  // Several waiters per call: a retry may wait beside the first attempt; one wakeup answers both.
  const waiters = new Map<string, Set<Waiter>>();
  const sub = nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) return;
      let payload: unknown;
      try {
        payload = JSON.parse(utf8.decode(msg.data));
      } catch {
        return;
      }
      const p = payload as Record<string, unknown>;
      const k = `${String(p?.agent_turn_id)}\u0000${String(p?.tool_call_id)}`;
      const ws = waiters.get(k);
      if (!ws) return;
      waiters.delete(k);
      const hs: Record<string, string> = {};
      if (msg.headers) for (const name of msg.headers.keys()) hs[name] = msg.headers.get(name);
      for (const w of ws) w.resolve({ payload, headers: hs });
    },
  });
  r = { sub, waiters };
  bySubject.set(subject, r);
  return r;
}

/** One JetStream client per connection (a new one per call is an object graph built and dropped each time). */
const jetstreams = new WeakMap<NatsConnection, JetStreamClient>();
function jetstream(nc: NatsConnection): JetStreamClient {
  let js = jetstreams.get(nc);
  if (!js) jetstreams.set(nc, (js = nc.jetstream()));
  return js;
}

const bad = (toolCallId: string, code: string, message: string): CallToolOutcome => ({ ok: false, toolCallId, problems: [{ code, message }] });

/** One whole UTP call. Never throws for a failed call: the outcome says what happened. */
export async function callTool(o: CallToolOptions): Promise<CallToolOutcome> {
  const toolCallId = o.toolCallId ?? `call-${randomUUID()}`;
  const subject = o.subject ?? (o.project && o.channel ? defaultToolSubject(o.ver ?? 'v1', o.project, o.channel, o.tool) : undefined);
  if (!subject) return bad(toolCallId, 'UTPC_BAD_INPUT', 'give subject, or project and channel');
  const route = parseSubject(subject);
  if (!route.ok || route.value.kind !== 'tool') return bad(toolCallId, 'UTPC_BAD_INPUT', `subject ${subject.slice(0, 200)} is not a cmd.tool subject`);
  const wake = buildWakeupSubject({ ver: route.value.ver, projectId: route.value.projectId, channelId: route.value.channelId, target: o.agentId });
  if (!wake.ok) return bad(toolCallId, 'UTPC_BAD_INPUT', 'agentId must be one subject token ([A-Za-z0-9_-]): it names the wakeup subject');
  const after = o.afterExecution ?? 'suspend';

  const cardId = toolCallCardId(o.agentTurnId, toolCallId);
  const callCard = {
    card_id: cardId,
    type: 'tool.call',
    created_at: new Date().toISOString(),
    content: {
      tool_call_id: toolCallId,
      tool_name: o.tool,
      arguments: o.arguments,
      agent_turn_id: o.agentTurnId,
      ...(o.stepId ? { step_id: o.stepId } : {}),
      ...(o.traceId ? { trace_id: o.traceId } : {}),
    },
    ...(o.stepId || o.traceId || o.traceparent || o.parentStepId
      ? {
          metadata: {
            ...(o.stepId ? { step_id: o.stepId } : {}),
            ...(o.parentStepId ? { parent_step_id: o.parentStepId } : {}),
            ...(o.traceId ? { trace_id: o.traceId } : {}),
            ...(o.traceparent ? { traceparent: o.traceparent } : {}),
          },
        }
      : {}),
  };
  const checked = parseCard(callCard);
  if (!checked.ok) return { ok: false, toolCallId, problems: checked.problems };
  // false on a retry: the card of the first attempt stays (the service reads that one). Awaited after
  // the command is made, while the insert is on its way (at once on PostgreSQL's held connection).
  const writing = o.store.putCard(callCard);
  writing.catch(() => undefined); // awaited below; observed already in case making the command throws first
  const command = commandMessage(o, { route: route.value, toolCallId, cardId, after });
  await writing;

  const { waiters } = router(o.nats, wake.value);
  const k = `${o.agentTurnId}\u0000${toolCallId}`;
  const timeoutMs = o.timeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  let timer: NodeJS.Timeout | undefined;
  const waiter: Waiter = { resolve: () => undefined };
  const unwait = () => {
    const ws = waiters.get(k);
    ws?.delete(waiter);
    if (ws?.size === 0) waiters.delete(k);
  };
  // Waits for the next wakeup of this call (registered before the command goes out, and again after
  // a wakeup that was not the call's answer: anyone who can publish on the wakeup subject can send one).
  const nextWakeup = () =>
    new Promise<{ payload: unknown; headers: Record<string, string> } | 'timeout' | 'closed'>((resolve) => {
      waiter.resolve = resolve;
      if (o.nats.isClosed()) return resolve('closed');
      const ws = waiters.get(k) ?? new Set<Waiter>();
      ws.add(waiter);
      waiters.set(k, ws);
      timer = setTimeout(() => {
        unwait();
        resolve('timeout');
      }, Math.max(0, deadline - Date.now()));
    });
  let woken = nextWakeup();

  try {
    // No msgID: JetStream would silently drop a retry of the same call within its duplicate window,
    // and the service would never see it to wake us again. The service's claim dedupes calls.
    await jetstream(o.nats).publish(subject, command.data, { headers: command.headers });
  } catch (e) {
    clearTimeout(timer);
    unwait();
    return bad(toolCallId, 'UTPC_PUBLISH', `cannot publish the command on ${subject}: ${(e as Error).message} (is \`airlock serve\` running with this tool registered?)`);
  }
  // The call's answer is the tool.result card its claim names. Anyone who can publish on the wakeup
  // subject can send a wakeup with this call's ids (naming another call's genuine result with the
  // same tool_call_id, a card that does not exist, or nothing valid): such a wakeup is not the answer,
  // and the call waits on for its own (the last refusal is returned if none comes in time).
  let refused: CallToolOutcome | undefined;
  for (;;) {
    const w = await woken;
    clearTimeout(timer);
    if (w === 'timeout') return refused ?? bad(toolCallId, 'UTPC_TIMEOUT', `no wakeup for ${toolCallId} within ${timeoutMs} ms`);
    if (w === 'closed') {
      unwait();
      return bad(toolCallId, 'UTPC_CONNECTION_CLOSED', `the NATS connection closed before the wakeup for ${toolCallId} came: the call may still run, or have run; call again with the same agent_turn_id and tool_call_id to get its answer (it does not run twice)`);
    }
    const r = await readAnswer(o.store, { agent_turn_id: o.agentTurnId, tool_call_id: toolCallId }, w.payload, w.headers);
    if (r.ok) return r;
    refused = r;
    woken = nextWakeup();
    // The real wakeup may have come while that one was checked (no waiter then): the claim says.
    const claim = await o.store.getClaim({ agent_turn_id: o.agentTurnId, tool_call_id: toolCallId }).catch(() => undefined);
    if (claim?.state === 'answered' && claim.wakeup) {
      clearTimeout(timer);
      unwait();
      return readAnswer(o.store, { agent_turn_id: o.agentTurnId, tool_call_id: toolCallId }, claim.wakeup.payload, claim.wakeup.headers);
    }
  }
}

/** The command of a call as it goes on the wire: payload fields and CG-* headers, as `identityIn` says. */
function commandMessage(o: CallToolOptions, c: { route: SubjectRoute; toolCallId: string; cardId: string; after: AfterExecution }) {
  const payload = commandPayload({
    form: 'tool',
    agent_id: o.agentId,
    agent_turn_id: o.agentTurnId,
    turn_epoch: o.turnEpoch,
    tool_call_id: c.toolCallId,
    after_execution: c.after,
    tool_call_card_id: c.cardId,
    tool_name: o.tool,
    ...(o.stepId ? { step_id: o.stepId } : {}),
  });
  const placement = o.identityIn ?? 'both';
  if (placement === 'headers') for (const f of ['agent_id', 'agent_turn_id', 'turn_epoch', 'tool_call_id', 'step_id']) delete payload[f];
  const h = natsHeaders();
  if (placement !== 'payload') {
    // The route too, as CommonGround's platforms send it (the service checks it against the subject).
    h.set('CG-Project-Id', c.route.projectId);
    h.set('CG-Channel-Id', c.route.channelId);
    h.set('CG-Agent-Id', o.agentId);
    h.set('CG-Turn-Id', o.agentTurnId);
    h.set('CG-Turn-Epoch', String(o.turnEpoch));
    h.set('CG-Tool-Call-Id', c.toolCallId);
    if (o.stepId) h.set('CG-Step-Id', o.stepId);
  }
  if (o.traceparent) h.set('traceparent', o.traceparent);
  return { data: JSON.stringify(payload), headers: h };
}

/**
 * Checks a wakeup against the UTP callback rules and reads the call's answer: the tool.result card
 * the call's claim names in the store, read in one query by the call's own anchor. A wakeup naming
 * any other card, or another call, is refused (UTPC_BAD_ANSWER): a wakeup is a message anyone on
 * the subject can publish.
 */
export async function readAnswer(store: Store, call: Anchor, payload: unknown, headers: Record<string, string>): Promise<CallToolOutcome> {
  const toolCallId = call.tool_call_id;
  // The read names the call's own anchor, nothing the wakeup says: it goes out first (at once on
  // PostgreSQL's held connection) and the wakeup is checked while it is on its way; a refused wakeup
  // drops what it reads.
  const reading = store.getResultCardFor(call);
  reading.catch(() => undefined); // awaited below, or dropped with a refused wakeup
  const cb = parseCallback(payload, headers);
  if (!cb.ok) return { ok: false, toolCallId, problems: cb.problems };
  if (cb.value.tool_call_id !== toolCallId || cb.value.agent_turn_id !== call.agent_turn_id) {
    return bad(toolCallId, 'UTPC_BAD_ANSWER', `the wakeup is for call ${cb.value.agent_turn_id.slice(0, 100)}/${cb.value.tool_call_id.slice(0, 100)}, not ${call.agent_turn_id}/${toolCallId}`);
  }
  const raw = await reading;
  if (raw === undefined) return bad(toolCallId, 'UTPC_BAD_ANSWER', `the store has no answer of call ${toolCallId} (no answered claim naming a tool.result card): is this client on the worker's store?`);
  if ((raw as { card_id?: unknown }).card_id !== cb.value.tool_result_card_id) {
    return bad(toolCallId, 'UTPC_BAD_ANSWER', `the wakeup names tool.result card ${cb.value.tool_result_card_id.slice(0, 100)}, which is not the answer the call's claim names`);
  }
  const card = parseCard(raw);
  if (!card.ok) return { ok: false, toolCallId, problems: card.problems };
  const match = checkCallbackAgainstResultCard(cb.value, card.value);
  if (!match.ok) return { ok: false, toolCallId, problems: match.problems };
  const content = match.value.content;
  return {
    ok: true,
    toolCallId,
    status: content.status,
    content,
    card: match.value,
    callback: cb.value,
    afterExecution: effectiveAfterExecution(content),
    ...(headers.traceparent ? { traceparent: headers.traceparent } : {}),
  };
}

/** Asks the service to cancel a call (Airlock's cancel command; docs/utp-service.md). */
export async function cancelTool(o: {
  nats: NatsConnection;
  subject: string;
  agentId: string;
  agentTurnId: string;
  turnEpoch: number;
  toolCallId: string;
  toolCallCardId?: string;
  afterExecution?: AfterExecution;
}): Promise<Problem[]> {
  const route = parseSubject(o.subject);
  if (!route.ok || route.value.kind !== 'tool') return [{ code: 'UTPC_BAD_INPUT', message: 'subject must be the tool\'s cmd.tool subject' }];
  const subject = cancelSubject(route.value.ver, route.value.projectId, route.value.channelId);
  const payload = {
    agent_id: o.agentId,
    agent_turn_id: o.agentTurnId,
    turn_epoch: o.turnEpoch,
    tool_call_id: o.toolCallId,
    after_execution: o.afterExecution ?? 'suspend',
    tool_call_card_id: o.toolCallCardId ?? `cancel-${o.toolCallId}`.slice(0, 256),
  };
  try {
    await jetstream(o.nats).publish(subject, JSON.stringify(payload));
    return [];
  } catch (e) {
    return [{ code: 'UTPC_PUBLISH', message: `cannot publish the cancel on ${subject}: ${(e as Error).message}` }];
  }
}
