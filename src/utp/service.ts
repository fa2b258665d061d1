import { randomBytes, randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { AckPolicy, DeliverPolicy, headers as natsHeaders, nanos, RetentionPolicy, StorageType, type JsMsg, type JetStreamManager, type NatsConnection } from 'nats';
import type { Problem } from '../base/problem.js';
import {
  buildWakeupSubject,
  callbackPayload,
  checkCommandAgainstCallCard,
  childTraceparent,
  parseCard,
  parseSubject,
  parseToolResultContent,
  parseTraceparent,
  SUBJECT_TOKEN,
  type JsonObject,
  type JsonValue,
  type ToolCallback,
  type ToolCallCard,
  type ToolResultContent,
  type UtpIdentity,
} from '../contracts/utp.js';
import type { Anchor, ApprovalRecord, ClaimRecord, Store, ToolRecord } from '../store/types.js';
import type { Workspace } from '../workspace/workspace.js';
import { executeTool, type Execution } from './execute.js';
import { decodeCommand, type CallContext } from './intake.js';
import { checkArguments, DEFAULT_APPROVAL_TIMEOUT_MS } from './tools.js';
import { ToolRegistry, type ToolEntry } from './registry.js';
import { sweepOrphans } from '../sandbox/ns/sweep.js';
import { jsonLog, type LogLevel } from '../base/json-log.js';

/** The service's events in the one JSON shape every Airlock service logs (the gate's too); pino sets the time. */
function serviceLogSink(): (e: Record<string, unknown>) => void {
  const log = jsonLog('airlock-utp');
  return ({ ts: _ts, level, event, ...fields }) => log.write((level as LogLevel) ?? 'info', String(event), fields);
}
import { openAuditLog, type AuditEvent } from '../audit/index.js';
import { anchorConflict, checkCancelAuthority, type CallOrigin } from './authority.js';
import { keyId, type ApprovalEvidence } from '../approval/decide.js';
import { verifyApproval } from '../approval/signature.js';
import { toolSha256, utpCallBytes, type UtpCallApproval } from '../approval/utp-call.js';
import { loadPolicy } from '../policy/load.js';

/**
 * Airlock as a UTP tool service (issue 6; docs/utp-service.md). Every worker — in this process or
 * another, on this host or another — pulls from ONE durable JetStream pull consumer over one
 * stream that captures the registered target_subjects, and shares one Store.
 *
 *   message -> decode/validate -> claim (agent_turn_id, tool_call_id) in the store
 *           -> read the tool.call card -> check arguments -> [approval] -> run -> answer:
 *              tool.result card + inbox report + claim state in ONE transaction -> wakeup + ack
 *
 * At most once: the claim is an INSERT on the anchor's primary key before anything runs; a
 * redelivery finds it and never runs the call. The ack goes out with the wakeup, or 25 ms after the
 * claim for a slower call, so JetStream does not hand a running call out again.
 * A worker that dies leaves a running claim whose lease (renewed by a heartbeat) expires; any
 * worker's sweeper then takes it over and answers `failed` / `executor_lost` — the tool is never
 * re-run. A redelivered or duplicate command finds the claim: it never runs, and if the call is
 * answered its wakeup is published again (same tool_result_card_id; no new card, no new report).
 */

export const serviceRules = [
  { code: 'UTPS_CARD_NOT_FOUND', spec: 'UTP 4.1: arguments are read from the tool.call card named by tool_call_card_id.', fix: 'Write the tool.call card to the card store before publishing the command.' },
  { code: 'UTPS_UNKNOWN_TOOL', spec: 'UTP 2: a tool is a row of resource.tools (project_id, tool_name).', fix: 'Register the tool with `airlock tools add`, or fix tool_name in the tool.call card.' },
  { code: 'UTPS_WRONG_SUBJECT', spec: 'UTP 4.1: a command is published on the tool\'s target_subject.', fix: 'Publish the command on the target_subject the registry gives for the tool.' },
  { code: 'UTPS_BAD_ARGUMENTS', spec: 'UTP 2: the arguments follow the tool\'s `parameters` JSON Schema.', fix: 'Fix the arguments in the tool.call card (see the tool\'s parameters).' },
  { code: 'UTPS_MISSING_CARD_ID', spec: 'UTP 4.1: tool_call_card_id is the core entry point; missing, the validation-failure path is taken.', fix: 'Send tool_call_card_id.' },
] as const;

export interface ServiceOptions {
  nats: NatsConnection;
  store: Store;
  workspace: Workspace;
  /** JetStream stream and durable consumer names (every worker of one deployment uses the same two). */
  stream?: string;
  durable?: string;
  workerId?: string;
  /** A running claim whose worker has not renewed it for this long is presumed lost. */
  leaseMs?: number;
  ackWaitMs?: number;
  /** Deliveries of one command JetStream makes at most (the consumer's max_deliver, set when it is created). */
  maxDeliver?: number;
  /** Nak delay after the n-th failed delivery (the last step repeats); default DEFAULT_REDELIVERY_DELAYS_MS. */
  redeliveryDelaysMs?: readonly number[];
  /** Calls this worker runs at once. */
  concurrency?: number;
  maxPayloadBytes?: number;
  /** How often the sweeper looks for expired claims and unpublished wakeups. */
  sweepMs?: number;
  /** An answered call whose wakeup was not published after this long gets it published by a sweeper. */
  wakeupRetryMs?: number;
  /** How often the registry is re-read (new tools, new subjects on the stream). */
  refreshMs?: number;
  approvalPollMs?: number;
  /** Where events go (`{ ts, level, event, worker, ...fields }`); default: the services' JSON log on stdout (src/base/json-log.ts). */
  log?: (event: Record<string, unknown>) => void;
  /** Called right before a tool runs (after every check and approval): audits and tests count runs with it. */
  onRun?: (call: { agent_turn_id: string; tool_call_id: string; tool_name: string }) => void;
  /**
   * Called at each step of a call on the hot path (bench:utp's timeline): received (decoded),
   * claimed (claim committed), ran (tool returned), committed (result card + report committed),
   * woken (wakeup handed to NATS). Cheap: nothing is built when it is not set.
   */
  onStep?: (step: ServiceStep, anchor: Anchor) => void;
}

export type ServiceStep = 'received' | 'claimed' | 'ran' | 'committed' | 'woken';

export interface ServiceStats {
  received: number;
  answered: number;
  duplicates: number;
  dropped: number;
  executorLost: number;
  republished: number;
  /** Commands given up after their last allowed delivery failed (logged `given-up`). */
  givenUp: number;
}

interface Running {
  anchor: Anchor;
  abort: AbortController;
  /** The call's own identity and route (from its command): who may cancel it, and where. */
  caller: CallOrigin;
}

const key = (a: Anchor): string => `${a.agent_turn_id}\u0000${a.tool_call_id}`;

export class UtpService {
  readonly workerId: string;
  readonly stream: string;
  readonly durable: string;
  readonly stats: ServiceStats = { received: 0, answered: 0, duplicates: 0, dropped: 0, executorLost: 0, republished: 0, givenUp: 0 };
  private readonly o: Required<Omit<ServiceOptions, 'workerId' | 'stream' | 'durable' | 'log' | 'onRun' | 'onStep'>> & { log: (e: Record<string, unknown>) => void };
  private readonly running = new Map<string, Running>();
  private readonly tools: ToolRegistry;
  private jsm: JetStreamManager | undefined;
  private stopping = false;
  private loop: Promise<void> | undefined;
  private timers: NodeJS.Timeout[] = [];
  private inFlight = 0;
  private wake: (() => void) | undefined;
  /** The consumer's message stream while pulling (stop() ends it). */
  private messages: { stop(err?: Error): void } | undefined;
  private readonly onRun: ServiceOptions['onRun'];
  private readonly onStep: ServiceOptions['onStep'];
  /** The consumer's own max_deliver (another worker may have created it with another value). */
  private maxDeliver = 0;

  constructor(opts: ServiceOptions) {
    this.workerId = opts.workerId ?? `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`;
    this.stream = opts.stream ?? 'AIRLOCK_UTP';
    this.durable = opts.durable ?? 'airlock-utp';
    const leaseMs = opts.leaseMs ?? 30_000;
    this.onRun = opts.onRun;
    this.onStep = opts.onStep;
    this.o = {
      nats: opts.nats,
      store: opts.store,
      workspace: opts.workspace,
      leaseMs,
      ackWaitMs: opts.ackWaitMs ?? 30_000,
      maxDeliver: opts.maxDeliver ?? 5,
      redeliveryDelaysMs: opts.redeliveryDelaysMs && opts.redeliveryDelaysMs.length > 0 ? opts.redeliveryDelaysMs : DEFAULT_REDELIVERY_DELAYS_MS,
      concurrency: opts.concurrency ?? 32,
      maxPayloadBytes: opts.maxPayloadBytes ?? 1024 * 1024,
      sweepMs: opts.sweepMs ?? Math.max(100, Math.floor(leaseMs / 2)),
      wakeupRetryMs: opts.wakeupRetryMs ?? 10_000,
      refreshMs: opts.refreshMs ?? 5_000,
      approvalPollMs: opts.approvalPollMs ?? 250,
      log: opts.log ?? serviceLogSink(),
    };
    this.tools = new ToolRegistry(() => loadPolicy(this.o.workspace.policyFile), (level, event, fields) => this.log(level, event, fields), this.o.workspace.utpRegistrationsFile);
  }

  private get subjects(): readonly string[] {
    return this.tools.subjects;
  }

  private log(level: 'info' | 'warn' | 'error', event: string, fields: Record<string, unknown> = {}): void {
    this.o.log({ ts: new Date().toISOString(), level, event, worker: this.workerId, ...fields });
  }

  // ---- set-up --------------------------------------------------------------------------------

  /** Creates/updates the stream and the durable consumer, then starts pulling, heart-beating and sweeping. */
  async start(): Promise<void> {
    // What a killed worker left on this host (its runs' cgroups and mounts) goes before any call runs.
    const swept = sweepOrphans();
    if (swept.runs.length > 0 || swept.errors.length > 0) this.log('warn', 'swept', { runs: swept.runs, errors: swept.errors });
    this.jsm = await this.o.nats.jetstreamManager();
    await this.refreshRegistry();
    if (this.subjects.length === 0) throw new Error('no tools are registered: add one with `airlock tools add` before `airlock serve`');
    if (this.tools.servable === 0) {
      throw new Error(`no registered tool can be run: each must be valid and signed by an operator ${this.o.workspace.policyFile} lists (\`airlock tools add ... --operator NAME\`; the log's tool-refused lines say why)`);
    }
    await this.ensureStreamAndConsumer();
    const every = (ms: number, f: () => Promise<void>) => {
      const t = setInterval(() => void f().catch((e: Error) => this.log('error', 'timer-failed', { error: e.message })), ms);
      t.unref();
      this.timers.push(t);
    };
    every(Math.max(50, Math.floor(this.o.leaseMs / 3)), () => this.heartbeat());
    every(this.o.sweepMs, () => this.sweep());
    every(this.o.refreshMs, async () => {
      const before = this.subjects.join(' ');
      await this.refreshRegistry();
      if (this.subjects.join(' ') !== before) await this.ensureStreamAndConsumer();
    });
    this.loop = this.pull();
    this.log('info', 'serving', { stream: this.stream, durable: this.durable, subjects: this.subjects });
  }

  /** Stops pulling, waits for the calls in flight (their answers are written), stops the timers. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.messages?.stop();
    this.wake?.();
    await this.loop;
    while (this.inFlight > 0) await new Promise((r) => setTimeout(r, 20));
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
  }

  private async refreshRegistry(): Promise<void> {
    this.tools.replace(await this.o.store.listTools());
  }

  private async ensureStreamAndConsumer(): Promise<void> {
    const jsm = this.jsm as JetStreamManager;
    const info = await jsm.streams.info(this.stream).catch(() => undefined);
    if (!info) {
      try {
        await jsm.streams.add({
          name: this.stream,
          subjects: [...this.subjects],
          // A work queue: a command is removed once a worker acknowledged it.
          retention: RetentionPolicy.Workqueue,
          storage: StorageType.File,
          max_age: nanos(7 * 24 * 3600 * 1000),
          duplicate_window: nanos(DUPLICATE_WINDOW_MS),
        });
      } catch (e) {
        // Another worker created it first (or the subjects overlap another stream: say so).
        if (!(await jsm.streams.info(this.stream).catch(() => undefined))) {
          throw new Error(`cannot create JetStream stream ${this.stream} over ${this.subjects.join(', ')}: ${(e as Error).message}`, { cause: e });
        }
      }
    } else {
      const want = [...new Set([...(info.config.subjects ?? []), ...this.subjects])].sort();
      if (want.join(' ') !== [...(info.config.subjects ?? [])].sort().join(' ')) {
        await jsm.streams.update(this.stream, { subjects: want });
        this.log('info', 'stream-subjects-updated', { subjects: want });
      }
      // A stream made by an older Airlock (2 min window) would swallow a caller's retry.
      if ((info.config.duplicate_window ?? 0) > nanos(DUPLICATE_WINDOW_MS)) {
        await jsm.streams.update(this.stream, { duplicate_window: nanos(DUPLICATE_WINDOW_MS) });
        this.log('info', 'stream-duplicate-window-updated', { duplicate_window_ms: DUPLICATE_WINDOW_MS });
      }
    }
    let consumer = await jsm.consumers.info(this.stream, this.durable).catch(() => undefined);
    if (!consumer) {
      try {
        consumer = await jsm.consumers.add(this.stream, {
          durable_name: this.durable,
          ack_policy: AckPolicy.Explicit,
          ack_wait: nanos(this.o.ackWaitMs),
          max_deliver: this.o.maxDeliver,
          deliver_policy: DeliverPolicy.All,
          max_ack_pending: 10_000,
        });
      } catch (e) {
        consumer = await jsm.consumers.info(this.stream, this.durable).catch(() => undefined);
        if (!consumer) throw e;
      }
    }
    this.maxDeliver = consumer.config.max_deliver ?? this.o.maxDeliver;
  }

  // ---- the pull loop -------------------------------------------------------------------------

  private async pull(): Promise<void> {
    const js = this.o.nats.jetstream();
    // Looked up inside the loop: a lookup that fails (a busy host, a NATS restart) is retried like a
    // failed pull, never the end of the loop (a worker that stops pulling would be deaf for good).
    let consumer: Awaited<ReturnType<typeof js.consumers.get>> | undefined;
    while (!this.stopping) {
      try {
        consumer ??= await js.consumers.get(this.stream, this.durable);
        // consume(), not a fetch() per batch: one inbox for the worker's life, pulls topped up as
        // messages arrive. A fetch's inbox closes when its batch ends, and a message the server sent
        // to a pull that had just expired on this side (a loaded host) was lost until ack_wait (30 s)
        // redelivered it; between two fetches no message was delivered at all.
        const msgs = await consumer.consume({ max_messages: this.o.concurrency });
        this.messages = msgs;
        if (this.stopping) msgs.stop();
        for await (const m of msgs) {
          if (this.stopping) {
            // Pulled but not started: back to the stream at once for another worker.
            m.nak();
            continue;
          }
          this.inFlight++;
          void this.handle(m)
            .catch((e: Error) => this.log('error', 'handler-crashed', { error: e.stack ?? String(e) }))
            .finally(() => {
              this.inFlight--;
              this.wake?.();
              this.wake = undefined;
            });
          // Back-pressure: at most `concurrency` calls run; further messages wait in the pull buffer.
          while (this.inFlight >= this.o.concurrency && !this.stopping) await new Promise<void>((r) => (this.wake = r));
        }
        this.messages = undefined;
        if (!this.stopping && !this.o.nats.isClosed()) {
          this.log('warn', 'pull-ended', { note: 'the consumer subscription ended; pulling again' });
          consumer = undefined;
          await new Promise((r) => setTimeout(r, 500));
        }
      } catch (e) {
        this.messages = undefined;
        if (this.stopping || this.o.nats.isClosed()) break;
        this.log('warn', 'fetch-failed', { error: (e as Error).message });
        consumer = undefined;
        await new Promise((r) => setTimeout(r, 500));
      }
      if (this.o.nats.isClosed()) break;
    }
  }

  /** One message, start to finish. Never throws into the loop; every path acks, naks or terms. */
  private async handle(m: JsMsg): Promise<void> {
    this.stats.received++;
    const intake = decodeCommand(m.subject, m.data, m.headers, {
      maxPayloadBytes: this.o.maxPayloadBytes,
      afterExecutionFor: (s) => this.tools.afterExecutionFor(s),
    });
    if (intake.kind === 'drop') {
      this.stats.dropped++;
      this.log('warn', 'dropped', { subject: m.subject, seq: m.info.streamSequence, problems: intake.problems.slice(0, 10) });
      // No reason string: servers before 2.10 ignore `+TERM <reason>` entirely (the reason is in our log).
      m.term();
      return;
    }
    const ctx = intake.ctx;
    const anchor: Anchor = { agent_turn_id: ctx.identity.agent_turn_id, tool_call_id: ctx.identity.tool_call_id };
    if (intake.kind === 'cancel') return this.handleCancel(m, ctx, anchor);
    this.onStep?.('received', anchor);

    let claim;
    let rawCard: unknown;
    try {
      // The card is read in the claim's round trip (reading runs nothing); it is used only if the claim is won.
      const readCardId = intake.kind === 'command' ? ctx.tool_call_card_id : null;
      claim = await this.o.store.claim(anchor, ctx.tool_call_card_id, this.workerId, this.o.leaseMs, contextRecord(ctx), readCardId);
      rawCard = claim.card;
    } catch (e) {
      // The store is down: let JetStream redeliver later.
      this.retryLater(m, ctx, 'claim-failed', (e as Error).message);
      return;
    }
    if (!claim.claimed) {
      m.ack();
      return this.onDuplicate(claim.existing, m.info.redelivered, ctx);
    }
    this.onStep?.('claimed', anchor);
    // The claim, not the ack, keeps the call from running twice (a redelivery finds the claim). So a
    // fast call's ack goes out in the same socket write as its wakeup; a slower one's after ACK_DEFER_MS.
    const ack = deferredAck(m, ACK_DEFER_MS, (error) => this.log('warn', 'ack-failed', { ...anchor, error }));

    const run: Running = { anchor, abort: new AbortController(), caller: { identity: ctx.identity, route: ctx.route } };
    this.running.set(key(anchor), run);
    try {
      let callCard: ToolCallCard | undefined;
      let execution: Execution;
      if (intake.kind === 'invalid') {
        execution = failure('failed', 'bad_request', 'the tool command is invalid; the tool was not run', intake.problems);
        this.log('warn', 'invalid-command', { ...anchor, problems: intake.problems.slice(0, 10) });
      } else {
        const r = await this.runCall(ctx, run, rawCard);
        callCard = r.callCard;
        execution = r.execution;
      }
      this.onStep?.('ran', anchor);
      await this.finish(ctx, execution, callCard, ack);
    } catch (e) {
      this.log('error', 'call-crashed', { ...anchor, error: (e as Error).stack ?? String(e) });
      await this.finish(ctx, failure('failed', 'internal_error', 'Airlock failed while handling the call'), undefined, ack).catch(() => undefined);
    } finally {
      ack();
      this.running.delete(key(anchor));
    }
  }

  /** The valid-command path: card, tool, arguments, approval, run. */
  private async runCall(ctx: CallContext, run: Running, prefetched: unknown): Promise<{ execution: Execution; callCard?: ToolCallCard }> {
    // What is refused before the host core sees the call is audited here (the core audits the rest).
    const refused = (stage: string, execution: Execution, callCard?: ToolCallCard) => {
      this.auditRefusal(ctx, stage, execution, callCard?.content.tool_name);
      return { execution, ...(callCard ? { callCard } : {}) };
    };
    const cmd = { ...ctx.identity, form: 'tool' as const, after_execution: ctx.after_execution, tool_call_card_id: ctx.tool_call_card_id ?? '', ...(ctx.tool_name ? { tool_name: ctx.tool_name } : {}) };
    const raw = prefetched ?? (ctx.tool_call_card_id ? await this.o.store.getCard(ctx.tool_call_card_id) : undefined);
    if (raw === undefined) return refused('card', failure('failed', 'bad_request', `no tool.call card ${ctx.tool_call_card_id} in the card store`, [{ code: 'UTPS_CARD_NOT_FOUND', message: 'the tool.call card named by tool_call_card_id does not exist' }]));
    const parsed = parseCard(raw);
    if (!parsed.ok) return refused('card', failure('failed', 'bad_request', 'the tool.call card is invalid', parsed.problems));
    const matched = checkCommandAgainstCallCard(cmd, parsed.value);
    if (!matched.ok) return refused('card', failure('failed', 'bad_request', 'the tool.call card does not match the command', matched.problems));
    const callCard = matched.value;
    const name = callCard.content.tool_name;
    const entry = this.tools.get(ctx.route.projectId, name) ?? (await this.lookupTool(ctx.route.projectId, name));
    if (!entry) return refused('tool', failure('failed', 'bad_request', `no tool ${name} is registered in project ${ctx.route.projectId}`, [{ code: 'UTPS_UNKNOWN_TOOL', message: `unknown tool ${name}` }]), callCard);
    if (entry.record.target_subject !== ctx.subject) {
      return refused('tool', failure('failed', 'bad_request', `tool ${name} is served on ${entry.record.target_subject}, not on ${ctx.subject}`, [{ code: 'UTPS_WRONG_SUBJECT', message: 'the command subject is not the tool\'s target_subject' }]), callCard);
    }
    if (entry.refused) return { callCard, execution: this.refuseRegistration(ctx, entry.record, entry.refused) };
    if (!entry.options) return refused('tool', failure('failed', 'internal_error', `tool ${name} has invalid options in the registry`), callCard);
    if (entry.options.retired) {
      return refused('tool', failure('failed', 'bad_request', `tool ${name} was retired by ${entry.registrant?.operator ?? 'an operator'}: it is not run any more`, [{ code: 'UTPS_TOOL_RETIRED', message: `${ctx.route.projectId}/${name} is retired (airlock tools retire)` }]), callCard);
    }
    const args = callCard.content.arguments;
    const bad = checkArguments(entry.record, args);
    if (bad.length > 0) return refused('arguments', failure('failed', 'bad_request', `the arguments do not match the parameters of ${name}`, bad), callCard);

    let approval: ApprovalEvidence | undefined;
    let approvalId: string | undefined;
    if (entry.options.approval?.required) {
      const decision = await this.awaitApproval(ctx, entry, args, run);
      if (decision.state !== 'approved') return refused('approval', decisionFailure(decision.state), callCard);
      // "approved" in the store is a claim anyone with the store can write: the operator's signature
      // over this exact call is the approval (verified here, and again by the host core).
      const signed = this.verifySignedApproval(ctx, decision.record, decision.bytes);
      if (!signed.ok) return { callCard, execution: failure('failed', 'auth_failed', 'the approval of this call is not a valid operator signature over it; the call was not run', signed.problems) };
      approval = signed.evidence;
      approvalId = decision.record.id;
    }
    if (run.abort.signal.aborted) return refused('canceled', failure('canceled', 'canceled', 'the call was canceled before it ran'), callCard);
    this.onRun?.({ agent_turn_id: ctx.identity.agent_turn_id, tool_call_id: ctx.identity.tool_call_id, tool_name: name });
    const caller = { ...callerOf(ctx), tool_name: name, ...(approvalId ? { approval_id: approvalId } : {}) };
    const execution = await executeTool(entry.record, entry.options, args, { workspace: this.o.workspace, signal: run.abort.signal, caller, ...(approval ? { approval } : {}) });
    if (run.abort.signal.aborted && execution.status !== 'canceled') {
      // The cancel came while the sandbox ran: the caller asked for no result, so none is promised.
      return { callCard, execution: { status: 'canceled', result: { ...execution.result, error_code: 'canceled', error_message: 'the call was canceled while it ran' }, error: { code: 'canceled', message: 'the call was canceled while it ran', detail: { run_status: execution.status } } } };
    }
    return { callCard, execution };
  }

  /** A call refused before the host core saw it: audited with who made it and why (the codes, never the arguments). */
  private auditRefusal(ctx: CallContext, stage: string, execution: Execution, toolName?: string): void {
    const detail = execution.error?.detail as { problems?: { code: string }[] } | undefined;
    const codes = [...new Set(detail?.problems?.map((p) => p.code) ?? [execution.error?.code ?? execution.status])];
    this.audit({ type: 'refused', actor: `agent:${ctx.identity.agent_id}`, detail: { door: 'utp', stage, codes, ...callerOf(ctx), subject: ctx.subject, ...(toolName ? { tool_name: toolName } : {}) } });
  }

  private async lookupTool(projectId: string, name: string): Promise<ToolEntry | undefined> {
    const t = await this.o.store.getTool(projectId, name);
    return t ? this.tools.add(t) : undefined;
  }

  /** A call of a tool whose registration this worker does not trust: never run, logged and audited. */
  private refuseRegistration(ctx: CallContext, record: ToolRecord, problems: Problem[]): Execution {
    const codes = [...new Set(problems.map((p) => p.code))];
    const anchor = { agent_turn_id: ctx.identity.agent_turn_id, tool_call_id: ctx.identity.tool_call_id };
    this.log('warn', 'call-refused', { ...anchor, tool_name: record.tool_name, codes });
    this.audit({ type: 'refused', detail: { door: 'utp', stage: 'registration', project_id: record.project_id, tool_name: record.tool_name, agent_id: ctx.identity.agent_id, ...anchor, codes } });
    // As the host core answers a run under a broken policy: Airlock's fault, not the caller's.
    if (codes.some((c) => c.startsWith('POLICY_'))) return failure('failed', 'internal_error', 'this worker\'s policy.yaml is missing or invalid, so no tool registration can be trusted; the call was not run', problems);
    return failure('failed', 'auth_failed', `the registration of ${record.project_id}/${record.tool_name} is not signed by an operator this worker trusts; the call was not run`, problems);
  }

  /**
   * Waits for a person's decision on the call. The row carries the exact call (`summary.call`) for
   * the operator to read and sign; the worker keeps its own copy of the bytes to verify against.
   */
  private async awaitApproval(
    ctx: CallContext,
    entry: ToolEntry,
    args: JsonObject,
    run: Running,
  ): Promise<{ state: 'approved'; record: ApprovalRecord; bytes: Buffer } | { state: 'rejected' | 'expired' | 'canceled' | 'vanished' | 'stopped' }> {
    const id = `apr-${randomUUID()}`;
    const timeout = entry.options?.approval?.timeout_ms ?? DEFAULT_APPROVAL_TIMEOUT_MS;
    const now = await this.o.store.now();
    const call: UtpCallApproval = {
      approval_id: id,
      project_id: ctx.route.projectId,
      tool_name: entry.record.tool_name,
      subject: ctx.subject,
      agent_id: ctx.identity.agent_id,
      agent_turn_id: ctx.identity.agent_turn_id,
      turn_epoch: ctx.identity.turn_epoch,
      tool_call_id: ctx.identity.tool_call_id,
      tool_call_card_id: ctx.tool_call_card_id ?? '',
      arguments: args,
      tool_sha256: toolSha256(entry.record),
    };
    const bytes = utpCallBytes(call);
    await this.o.store.createApproval({
      id,
      agent_turn_id: ctx.identity.agent_turn_id,
      tool_call_id: ctx.identity.tool_call_id,
      project_id: ctx.route.projectId,
      tool_name: entry.record.tool_name,
      summary: { agent_id: ctx.identity.agent_id, subject: ctx.subject, arguments: args, call, ...(entry.options?.description_for_approver ? { note: entry.options.description_for_approver } : {}) },
      expires_at: now + timeout,
    });
    this.log('info', 'approval-pending', { id, tool_name: entry.record.tool_name, agent_turn_id: ctx.identity.agent_turn_id, tool_call_id: ctx.identity.tool_call_id });
    for (;;) {
      if (run.abort.signal.aborted) {
        await this.o.store.decideApproval(id, 'canceled', null, 'the call was canceled');
        return { state: 'canceled' };
      }
      // A stopping worker does not wait minutes for a person: the call is answered (not run) now.
      if (this.stopping && (await this.o.store.decideApproval(id, 'canceled', null, 'the worker stopped before anyone decided'))) return { state: 'stopped' };
      const a = await this.o.store.getApproval(id);
      // Removed from the store (by anyone with it): nobody can decide it any more.
      if (!a) return { state: 'vanished' };
      if (a.state !== 'pending') return a.state === 'approved' ? { state: 'approved', record: a, bytes } : { state: a.state === 'rejected' ? 'rejected' : a.state === 'canceled' ? 'canceled' : 'expired' };
      if ((await this.o.store.now()) >= now + timeout) {
        // decideApproval only moves a pending one: a decision that raced the timeout wins.
        // Else a decision raced it: read on the next round (after the pause: never a loop without one).
        if (await this.o.store.decideApproval(id, 'expired', null, `no decision within ${timeout} ms`)) return { state: 'expired' };
      }
      await new Promise((r) => setTimeout(r, this.o.approvalPollMs));
    }
  }

  /**
   * The signature on an approved row, checked against the bytes of the call this worker is about to
   * run and the policy's operator keys (the same check as `airlock approve`'s). A refusal is logged
   * and audited; a valid one is audited with its key id and becomes the host core's evidence.
   */
  private verifySignedApproval(ctx: CallContext, record: ApprovalRecord, bytes: Buffer): { ok: true; evidence: ApprovalEvidence } | { ok: false; problems: Problem[] } {
    const anchor = { agent_turn_id: ctx.identity.agent_turn_id, tool_call_id: ctx.identity.tool_call_id };
    const policy = loadPolicy(this.o.workspace.policyFile);
    const problems = policy.ok
      ? verifyApproval({ sigText: record.signature, bytes, requestId: record.id, approvedBy: record.decided_by ?? '', policy: policy.value, now: new Date() })
      : policy.problems;
    const base = { door: 'utp', approval_id: record.id, agent_id: ctx.identity.agent_id, agent_turn_id: anchor.agent_turn_id, tool_call_id: anchor.tool_call_id, tool_name: record.tool_name };
    if (problems.length > 0) {
      const codes = [...new Set(problems.map((p) => p.code))];
      this.log('warn', 'approval-refused', { ...anchor, approval_id: record.id, decided_by: record.decided_by, codes, problems: problems.slice(0, 5) });
      this.audit({ type: 'refused', action_id: record.id, ...(record.decided_by ? { actor: record.decided_by } : {}), detail: { ...base, stage: 'approval', codes } });
      return { ok: false, problems };
    }
    const operator = record.decided_by ?? '';
    const op = policy.ok ? policy.value.operators.find((o) => o.name === operator) : undefined;
    const source = `key:${operator}:${op ? keyId(op.public_key) : '?'}`;
    this.log('info', 'approval-verified', { ...anchor, approval_id: record.id, decision_source: source });
    this.audit({ type: 'approved', action_id: record.id, actor: operator, detail: { ...base, decision_source: source } });
    return { ok: true, evidence: { kind: 'signature', sigText: record.signature, bytes, requestId: record.id, approvedBy: operator } };
  }

  // ---- answering -----------------------------------------------------------------------------

  /** Writes the tool.result card + inbox report atomically (if this worker still owns the claim), then wakes the agent. */
  private async finish(ctx: CallContext, execution: Execution, callCard?: ToolCallCard, afterWakeup?: () => void): Promise<void> {
    const id = ctx.identity;
    const anchor = { agent_turn_id: id.agent_turn_id, tool_call_id: id.tool_call_id };
    if (!callCard && ctx.tool_call_card_id) {
      // For trace/step metadata when the call was not run (invalid command, executor lost).
      const raw = await this.o.store.getCard(ctx.tool_call_card_id).catch(() => undefined);
      const c = raw === undefined ? undefined : parseCard(raw);
      if (c?.ok && c.value.type === 'tool.call' && c.value.content.tool_call_id === id.tool_call_id) callCard = c.value;
    }
    let content: ToolResultContent = { tool_call_id: id.tool_call_id, status: execution.status, after_execution: ctx.after_execution, result: execution.result, ...(execution.error ? { error: execution.error } : {}) };
    const self = parseToolResultContent(content);
    if (!self.ok) {
      // Our own answer failed our own contract: a bug; answer an honest internal_error instead.
      this.log('error', 'result-self-check-failed', { ...anchor, problems: self.problems });
      content = { tool_call_id: id.tool_call_id, status: 'failed', after_execution: ctx.after_execution, result: { error_code: 'internal_error', error_message: 'Airlock built an invalid result' }, error: { code: 'internal_error', message: 'Airlock built an invalid result' } };
    }
    const stepId = callCard?.metadata?.step_id ?? callCard?.content.step_id ?? id.step_id;
    const traceId = callCard?.metadata?.trace_id ?? callCard?.content.trace_id;
    // The call's lineage goes on the result, as CommonGround's result builder does (to_lineage_meta).
    const parentStepId = callCard?.metadata?.parent_step_id;
    const parentTp = id.traceparent ?? callCard?.metadata?.traceparent;
    const tp = parentTp ? childTraceparent(parentTp) : undefined;
    const childTp = tp?.ok ? tp.value : undefined;
    const tpTrace = childTp ? parseTraceparent(childTp) : undefined;
    const metadata: Record<string, string> = {};
    if (traceId) metadata.trace_id = traceId;
    if (stepId) metadata.step_id = stepId;
    if (parentStepId) metadata.parent_step_id = parentStepId;
    // The card's traceparent must carry the card's trace_id (readCard checks it).
    if (childTp && tpTrace?.ok && (!traceId || tpTrace.value.traceId === traceId)) metadata.traceparent = childTp;
    const card = { card_id: `card-result-${randomUUID()}`, type: 'tool.result' as const, created_at: new Date().toISOString(), content, ...(Object.keys(metadata).length ? { metadata } : {}) };
    const callback: ToolCallback = {
      agent_id: id.agent_id,
      agent_turn_id: id.agent_turn_id,
      turn_epoch: id.turn_epoch,
      tool_call_id: id.tool_call_id,
      ...(stepId ? { step_id: stepId } : {}),
      tool_result_card_id: card.card_id,
      status: content.status,
      after_execution: ctx.after_execution,
    };
    const payload = callbackPayload(callback);
    const hs: Record<string, string> = {
      'CG-Project-Id': ctx.route.projectId,
      'CG-Channel-Id': ctx.route.channelId,
      'CG-Agent-Id': id.agent_id,
      'CG-Turn-Id': id.agent_turn_id,
      'CG-Turn-Epoch': String(id.turn_epoch),
      'CG-Tool-Call-Id': id.tool_call_id,
      ...(stepId ? { 'CG-Step-Id': stepId } : {}),
      ...(childTp ? { traceparent: childTp } : {}),
    };
    const subject = wakeupSubjectFor(ctx);
    const answering = this.o.store.answer({
      ...anchor,
      worker_id: this.workerId,
      card,
      report: { agent_id: id.agent_id, kind: 'tool.report', payload },
      wakeup: { subject: subject ?? '', payload, headers: hs },
    });
    // On the store's held connection the statement has gone out by now (PostgreSQL; through the pool it
    // goes on the next tick, SQLite has committed): the wakeup is made while it is on its way.
    answering.catch(() => undefined); // awaited below; observed already in case the wakeup's making throws first
    const wakeup = subject ? wakeupMessage(payload, hs) : undefined;
    const outcome = await answering;
    if (!outcome.ok) {
      // Someone else answered (our lease expired and a sweeper answered executor_lost): ours is discarded.
      this.log('warn', 'answer-discarded', { ...anchor, reason: outcome.reason, status: content.status });
      return;
    }
    this.onStep?.('committed', anchor);
    this.stats.answered++;
    try {
      if (subject && wakeup) {
        this.publishWakeup(anchor, subject, wakeup, () => {
          afterWakeup?.();
          this.onStep?.('woken', anchor); // handed to NATS: the socket write follows in a microtask
        });
      }
    } finally {
      // After the wakeup: the log line (serialised and written to stdout) is not on the agent's path.
      this.log('info', 'answered', { ...anchor, status: content.status, code: content.error?.code, card_id: card.card_id });
      if (!subject) this.log('warn', 'no-wakeup-subject', { ...anchor, reason: 'agent_id is not a subject token: the report is in the inbox, no wakeup is published' });
    }
  }

  private publishWakeup(anchor: Anchor, subject: string, wakeup: WakeupMessage, afterPublish?: () => void): void {
    this.o.nats.publish(subject, wakeup.data, { headers: wakeup.headers });
    afterPublish?.(); // queued in the same tick: one socket write for both
    // Not awaited: a lost "woken" flag only means a sweeper publishes the same wakeup again later.
    void this.o.store.markWoken(anchor).catch((e: Error) => this.log('warn', 'mark-woken-failed', { ...anchor, error: e.message }));
  }

  /** A duplicate or redelivered command: never run again; an answered call is woken again with the same card. */
  private onDuplicate(existing: ClaimRecord, redelivered: boolean, ctx: CallContext): void {
    this.stats.duplicates++;
    const anchor = { agent_turn_id: existing.agent_turn_id, tool_call_id: existing.tool_call_id };
    // Only the call's own sender gets its answer again: the same ids from another agent or project
    // are someone reusing (or squatting) the anchor.
    const conflict = anchorConflict(ctx, contextFromRecord(existing));
    if (conflict) {
      this.log('warn', 'anchor-conflict', { ...anchor, code: conflict.code, agent_id: ctx.identity.agent_id, subject: ctx.subject, problems: [conflict] });
      this.audit({
        type: 'refused',
        actor: `agent:${ctx.identity.agent_id}`,
        detail: { door: 'utp', stage: 'claim', codes: [conflict.code], agent_id: ctx.identity.agent_id, agent_turn_id: anchor.agent_turn_id, tool_call_id: anchor.tool_call_id, subject: ctx.subject },
      });
      return;
    }
    this.log('info', 'duplicate', { ...anchor, state: existing.state, redelivered, result_card_id: existing.result_card_id });
    if (existing.state === 'answered' && existing.wakeup?.subject && this.storedWakeupOk(existing)) {
      this.stats.republished++;
      this.publishWakeup(anchor, existing.wakeup.subject, wakeupMessage(existing.wakeup.payload, existing.wakeup.headers));
    }
  }

  /**
   * A cancel: obeyed only from the call's own agent and turn (authority.ts), refused (logged and
   * audited) from anyone else while the call goes on. A cancel for a call no worker has claimed
   * yet waits for the call's command, which alone says who made the call.
   */
  private async handleCancel(m: JsMsg, ctx: CallContext, anchor: Anchor): Promise<void> {
    try {
      const mine = this.running.get(key(anchor));
      const existing = mine ? undefined : await this.o.store.getClaim(anchor);
      if (!mine && !existing) return this.cancelLater(m, ctx, anchor);
      const caller = mine?.caller ?? (existing ? contextFromRecord(existing) : undefined);
      const refused = checkCancelAuthority(ctx, caller);
      if (refused.length > 0) {
        m.ack();
        this.refuseCancel(ctx, anchor, refused, caller);
        return;
      }
      if (mine) {
        await this.o.store.requestCancel(anchor);
        mine.abort.abort();
        m.ack();
        this.log('info', 'cancel-requested', { ...anchor, where: 'this worker' });
        return;
      }
      m.ack();
      if (existing?.state === 'running') {
        await this.o.store.requestCancel(anchor);
        this.log('info', 'cancel-requested', { ...anchor, where: existing.worker_id });
      } else this.log('info', 'cancel-too-late', { ...anchor, result_card_id: existing?.result_card_id });
    } catch (e) {
      this.retryLater(m, ctx, 'cancel-failed', (e as Error).message);
    }
  }

  /** No worker has claimed the call yet: the cancel comes back after a delay; after its last delivery it is dropped. */
  private cancelLater(m: JsMsg, ctx: CallContext, anchor: Anchor): void {
    const delivery = m.info.redeliveryCount;
    if (this.maxDeliver > 0 && delivery >= this.maxDeliver) {
      this.log('warn', 'cancel-unknown-call', { ...anchor, agent_id: ctx.identity.agent_id, code: 'UTPS_CANCEL_UNKNOWN_CALL', delivery, note: 'no worker saw this call\'s command before the cancel\'s last delivery: the cancel is dropped' });
      m.term();
      return;
    }
    const delay = redeliveryDelayMs(delivery, CANCEL_WAIT_DELAYS_MS);
    this.log('info', 'cancel-waits-for-call', { ...anchor, delivery, retry_in_ms: delay });
    m.nak(delay);
  }

  private refuseCancel(ctx: CallContext, anchor: Anchor, problems: Problem[], origin: CallOrigin | undefined): void {
    const code = problems[0]?.code ?? 'UTPS_CANCEL_NOT_AUTHORIZED';
    const caller = origin?.identity;
    this.log('warn', 'cancel-refused', { ...anchor, code, agent_id: ctx.identity.agent_id, caller_agent_id: caller?.agent_id ?? null, problems });
    this.audit({
      type: 'refused',
      actor: `agent:${ctx.identity.agent_id}`,
      detail: { door: 'utp', stage: 'cancel', codes: [code], agent_id: ctx.identity.agent_id, agent_turn_id: anchor.agent_turn_id, tool_call_id: anchor.tool_call_id, subject: ctx.subject, ...(caller ? { caller_agent_id: caller.agent_id } : {}) },
    });
  }

  /** Appends to the workspace's audit log; a log that refuses appends is reported, never fatal to the call. */
  private audit(event: AuditEvent): void {
    try {
      openAuditLog(this.o.workspace.auditFile).append(event);
    } catch (e) {
      this.log('error', 'audit-append-failed', { type: event.type, error: (e as Error).message });
    }
  }

  /**
   * A delivery that failed for a passing reason (the store is down): nak it with a delay that grows
   * with each delivery, so the retries span an outage of minutes; on the last delivery JetStream
   * allows, log the command as given up and term() it, so no call disappears without a trace.
   */
  private retryLater(m: JsMsg, ctx: CallContext, event: string, error: string): void {
    const anchor = { agent_turn_id: ctx.identity.agent_turn_id, tool_call_id: ctx.identity.tool_call_id };
    const delivery = m.info.redeliveryCount;
    if (this.maxDeliver > 0 && delivery >= this.maxDeliver) {
      this.stats.givenUp++;
      this.log('error', 'given-up', {
        ...anchor,
        agent_id: ctx.identity.agent_id,
        subject: m.subject,
        seq: m.info.streamSequence,
        tool_call_card_id: ctx.tool_call_card_id,
        delivery,
        reason: `${event}: ${error}`,
        note: 'the last delivery JetStream allows failed: this command is dropped and will not be answered',
      });
      m.term();
      return;
    }
    const delay = redeliveryDelayMs(delivery, this.o.redeliveryDelaysMs);
    this.log('error', event, { ...anchor, error, delivery, retry_in_ms: delay });
    m.nak(delay);
  }

  /**
   * A wakeup read back from the store is published only to a `cmd.agent.<target>.wakeup` subject:
   * the row is as anyone with the store wrote it, and the worker's NATS credentials reach further
   * than a caller's (`$JS.API.*`, other projects' subjects).
   */
  private storedWakeupOk(c: ClaimRecord): boolean {
    const route = parseSubject(c.wakeup?.subject);
    if (route.ok && route.value.kind === 'wakeup') return true;
    this.log('error', 'stored-wakeup-refused', { agent_turn_id: c.agent_turn_id, tool_call_id: c.tool_call_id, subject: String(c.wakeup?.subject).slice(0, 200), note: 'a stored wakeup whose subject is not a cmd.agent.<target>.wakeup subject is never published' });
    return false;
  }

  // ---- leases --------------------------------------------------------------------------------

  private async heartbeat(): Promise<void> {
    if (this.running.size === 0) return;
    const canceled = await this.o.store.heartbeat(this.workerId, this.o.leaseMs, [...this.running.values()].map((r) => r.anchor));
    for (const a of canceled) this.running.get(key(a))?.abort.abort();
  }

  /** Expired claims (their worker died) are answered failed/executor_lost; stuck wakeups are published. */
  private async sweep(): Promise<void> {
    const lost = await this.o.store.takeOverExpired(this.workerId, this.o.leaseMs, 100);
    for (const c of lost) {
      // A call this worker is still running, whose heartbeats failed for a lease (a store outage):
      // the takeover gave the lease back to it, and its own answer will come. Answering it
      // executor_lost would tell the agent it failed while the tool runs on.
      if (this.running.has(key(c))) {
        this.log('warn', 'lease-retaken', { agent_turn_id: c.agent_turn_id, tool_call_id: c.tool_call_id, note: 'the lease of a call this worker still runs had run out (heartbeats failing?); the sweep renewed it' });
        continue;
      }
      const ctx = contextFromRecord(c);
      if (!ctx) {
        this.log('error', 'executor-lost-unanswerable', { agent_turn_id: c.agent_turn_id, tool_call_id: c.tool_call_id });
        continue;
      }
      this.stats.executorLost++;
      this.log('warn', 'executor-lost', { agent_turn_id: c.agent_turn_id, tool_call_id: c.tool_call_id });
      await this.finish(ctx, failure('failed', 'executor_lost', 'the worker running this call stopped before answering; the call was not re-run (at most once)'));
    }
    for (const c of await this.o.store.unwokenAnswers(this.o.wakeupRetryMs, 100)) {
      if (!c.wakeup?.subject) continue;
      if (!this.storedWakeupOk(c)) {
        // Never publishable: marked so the sweeper does not list it again.
        void this.o.store.markWoken({ agent_turn_id: c.agent_turn_id, tool_call_id: c.tool_call_id }).catch(() => undefined);
        continue;
      }
      this.stats.republished++;
      this.publishWakeup({ agent_turn_id: c.agent_turn_id, tool_call_id: c.tool_call_id }, c.wakeup.subject, wakeupMessage(c.wakeup.payload, c.wakeup.headers));
    }
  }
}

// ---- helpers -----------------------------------------------------------------------------------

/**
 * Nak delays after the 1st, 2nd, ... failed delivery. With max_deliver 5 the four retries span
 * 1 + 5 + 30 + 120 s: a store outage of about 2.5 minutes is ridden out; a longer one gives up.
 */
export const DEFAULT_REDELIVERY_DELAYS_MS: readonly number[] = [1000, 5000, 30_000, 120_000];

/** The nak delay after failed delivery number `delivery` (1 = the first); the last step repeats. */
export function redeliveryDelayMs(delivery: number, delays: readonly number[]): number {
  const i = Math.min(Math.max(delivery, 1), delays.length) - 1;
  return delays[i] ?? 1000;
}

/**
 * JetStream's duplicate window, at the server's minimum (it cannot be switched off): the claim in
 * the store dedupes calls, and a longer window would silently drop a caller's retry of a call
 * (platforms set Nats-Msg-Id to the call's id), so the retry would never get its wakeup again.
 */
const DUPLICATE_WINDOW_MS = 100;

/** Nak delays of a cancel that waits for its call's command (1st, 2nd, ... delivery; the last repeats). */
const CANCEL_WAIT_DELAYS_MS: readonly number[] = [250, 1000, 5000, 30_000];

/** How long a won call may run before its command is acknowledged anyway (far below ack_wait). */
const ACK_DEFER_MS = 25;

/** Acks `m` once: when the returned function is called, or after `ms`, whichever comes first. */
function deferredAck(m: JsMsg, ms: number, log: (error: string) => void): () => void {
  let acked = false;
  const ack = () => {
    if (acked) return;
    acked = true;
    clearTimeout(timer);
    try {
      m.ack();
    } catch (e) {
      // The connection is closing: the call is claimed, so a redelivery finds the claim.
      log((e as Error).message);
    }
  };
  const timer = setTimeout(ack, ms);
  return ack;
}

function failure(status: ToolResultContent['status'], code: string, message: string, problems?: Problem[]): Execution {
  const detail: JsonValue | undefined = problems && problems.length > 0 ? { problems: problems.slice(0, 20).map((p) => ({ code: p.code, message: p.message.slice(0, 500), ...(p.path ? { path: p.path } : {}) })) } : undefined;
  return { status, result: { error_code: code, error_message: message }, error: detail === undefined ? { code, message } : { code, message, detail } };
}

function decisionFailure(d: 'rejected' | 'expired' | 'canceled' | 'vanished' | 'stopped'): Execution {
  if (d === 'stopped') return failure('failed', 'upstream_unavailable', 'the worker stopped while this call waited for a person\'s approval; it was not run: call again with a new tool_call_id (these ids keep this answer)');
  if (d === 'vanished') return failure('failed', 'auth_failed', 'the approval request of this call was removed from the store, so no one can approve it; the call was not run');
  if (d === 'rejected') return failure('failed', 'auth_failed', 'a person rejected this call (airlock approvals reject)');
  if (d === 'canceled') return failure('canceled', 'canceled', 'the call was canceled while it waited for approval');
  return failure('timeout', 'tool_timeout', 'no one approved this call in time', [{ code: 'UTPS_APPROVAL_TIMEOUT', message: 'the call waited in `airlock approvals` past its approval.timeout_ms' }]);
}

/** A wakeup as it goes on the wire: the payload's JSON text and its NATS headers. */
interface WakeupMessage {
  data: string;
  headers: ReturnType<typeof natsHeaders>;
}

function wakeupMessage(payload: Record<string, unknown>, hs: Record<string, string>): WakeupMessage {
  const headers = natsHeaders();
  for (const [k, v] of Object.entries(hs)) headers.set(k, v);
  return { data: JSON.stringify(payload), headers };
}

/** Wakeup subjects by command subject and agent: built and checked once, not on every answer. */
const wakeupSubjects = new Map<string, string | undefined>();

function wakeupSubjectFor(ctx: CallContext): string | undefined {
  const k = `${ctx.subject}\u0000${ctx.identity.agent_id}`;
  if (wakeupSubjects.has(k)) return wakeupSubjects.get(k);
  let subject: string | undefined;
  if (SUBJECT_TOKEN.test(ctx.identity.agent_id)) {
    const s = buildWakeupSubject({ ver: ctx.route.ver, projectId: ctx.route.projectId, channelId: ctx.route.channelId, target: ctx.identity.agent_id });
    subject = s.ok ? s.value : undefined;
  }
  if (wakeupSubjects.size >= 1000) wakeupSubjects.clear();
  wakeupSubjects.set(k, subject);
  return subject;
}

/** A call's identity as the host core records it (ExecuteRequest.caller). */
const callerOf = (ctx: CallContext): Record<string, string> => ({
  agent_id: ctx.identity.agent_id,
  agent_turn_id: ctx.identity.agent_turn_id,
  tool_call_id: ctx.identity.tool_call_id,
  project_id: ctx.route.projectId,
});

/** What a claim keeps so another worker can answer the call without its command. */
function contextRecord(ctx: CallContext): Record<string, unknown> {
  return { subject: ctx.subject, identity: ctx.identity, after_execution: ctx.after_execution, tool_call_card_id: ctx.tool_call_card_id, ...(ctx.tool_name ? { tool_name: ctx.tool_name } : {}) };
}

function contextFromRecord(c: ClaimRecord): CallContext | undefined {
  const x = c.context;
  if (!x || typeof x.subject !== 'string') return undefined;
  const route = parseSubject(x.subject);
  if (!route.ok) return undefined;
  const identity = x.identity as UtpIdentity;
  if (!identity || identity.agent_turn_id !== c.agent_turn_id || identity.tool_call_id !== c.tool_call_id) return undefined;
  return {
    subject: x.subject,
    route: route.value,
    identity,
    after_execution: x.after_execution === 'terminate' ? 'terminate' : 'suspend',
    tool_call_card_id: c.tool_call_card_id,
    ...(typeof x.tool_name === 'string' ? { tool_name: x.tool_name } : {}),
  };
}
