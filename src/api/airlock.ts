import { resolve } from 'node:path';
import type { NatsConnection } from 'nats';
import type { Action } from '../action/action.js';
import type { ApprovalEvidence } from '../approval/decide.js';
import { keyDir } from '../approval/keys.js';
import { runFile, terminalUser, type FileRunOutcome } from '../cli/run-file.js';
import { confirm } from '../commit/confirm.js';
import { promote, type PromoteOptions, type PromoteOutcome } from '../commit/promote.js';
import { rollback, type RollbackOptions, type RollbackOutcome } from '../commit/rollback.js';
import type { Problem } from '../base/problem.js';
import { commitApproval, prepareApproval } from '../gates/approve.js';
import { execute, type ExecuteOutcome } from '../host/execute.js';
import type { RunEvent } from '../sandbox/types.js';
import { closeLanes, warmLanes } from '../pipeline/warm.js';
import { openStore, type Store } from '../store/open.js';
import { callTool, type CallToolOptions, type CallToolOutcome } from '../utp/client.js';
import { connectNats } from '../utp/connect.js';
import { openWorkspace, type Workspace } from '../workspace/workspace.js';

/**
 * `openAirlock({ workspace })`: Airlock as a library, one object per workspace. Every method is a
 * thin door onto the host core and the modules the CLI uses (nothing is re-implemented here):
 * run = `airlock run`, execute = the host core itself, approve = `airlock approve --yes`, confirm,
 * promote and rollback = the commit commands, callTool = the UTP agent client. NATS and the card
 * store are opened on the first callTool; close() ends what was opened (and the warm lanes).
 */
export interface OpenAirlockOptions {
  /** The workspace folder (created with the default policy.yaml on first use). Default: $AIRLOCK_HOME, else ~/.airlock. */
  workspace?: string;
  /** NATS URL for callTool (e.g. nats://127.0.0.1:4222); connected on the first call. */
  nats?: string;
  /** The card store shared with `airlock serve --nats`: a postgres:// URL or a SQLite file. Default: <workspace>/airlock.db. */
  db?: string;
  /** Who approves, confirms, promotes and rolls back through this object. Default: the user running the process. */
  operator?: string;
  /** Where operator private keys are (approve, confirm). Default: $AIRLOCK_KEYS, else ~/.config/airlock/keys. */
  keyDir?: string;
  /**
   * Keep Monty workers and ns sandboxes started ahead of need, as `airlock serve` does (for a
   * long-lived process; see "Warm lanes" in the README). Default: false (each run starts its own).
   */
  warm?: boolean;
}

export interface RunOptions {
  /** Where the inputs are (default: the file's folder). */
  inputsDir?: string;
  signal?: AbortSignal;
  onEvent?: (e: RunEvent) => void;
}

export interface ExecuteOptions extends RunOptions {
  /** How the action was approved; checked by the host core against the policy (see ApprovalEvidence). */
  approval: ApprovalEvidence;
  /** The request's language, for the policy's `languages` rule. */
  language?: string;
}

export type ApproveOutcome = { ok: true; requestId: string; file: string } | { ok: false; problems: Problem[] };
export type ConfirmOutcome = ReturnType<typeof confirm>;
export type AirlockCallOptions = Omit<CallToolOptions, 'nats' | 'store'>;

export interface Airlock {
  readonly workspace: Workspace;
  /** Validates and runs a Tool Request or an Action Descriptor file once, as `airlock run` does (door `library`). */
  run(file: string, opts?: RunOptions): Promise<FileRunOutcome>;
  /** Hands an Action to the host core: policy, approval, sandbox, judge, run record, audit. */
  execute(action: Action, opts: ExecuteOptions): Promise<ExecuteOutcome>;
  /** Signs a Tool Request with the operator's key and moves it into requests_in/ for the gate (`airlock approve --yes`). */
  approve(file: string, opts?: { operator?: string }): ApproveOutcome;
  /** Signs the exact diff of a REQUIRE_CONFIRMATION run so that it can be promoted (`airlock confirm`). */
  confirm(sandboxId: string, opts?: { operator?: string }): ConfirmOutcome;
  /** Applies a run's verified diff once, all or nothing (`airlock promote`). */
  promote(sandboxId: string, opts?: Omit<PromoteOptions, 'actor'>): Promise<PromoteOutcome>;
  /** Restores exactly what a promotion touched (`airlock rollback`). */
  rollback(sandboxId: string, opts?: Omit<RollbackOptions, 'actor'>): Promise<RollbackOutcome>;
  /** One UTP call over NATS, as an agent makes it (needs `nats`; the service is `airlock serve --nats`). */
  callTool(o: AirlockCallOptions): Promise<CallToolOutcome>;
  /** Closes the NATS connection and the store if they were opened, and ends warm Monty workers and waiting sandboxes. */
  close(): Promise<void>;
}

export function openAirlock(opts: OpenAirlockOptions = {}): Airlock {
  const ws = openWorkspace(opts.workspace);
  const operator = opts.operator ?? terminalUser();
  const keys = keyDir(opts.keyDir);
  let nats: Promise<NatsConnection> | undefined;
  let store: Promise<Store> | undefined;
  let closed = false;
  if (opts.warm) warmLanes({ monty: true });

  return {
    workspace: ws,
    run: (file, o = {}) => runFile(resolve(file), { workspace: ws, operator, door: 'library', ...o }),
    execute(action, o) {
      if (action.inputs.length > 0 && o.inputsDir === undefined) throw new TypeError(`execute: action ${action.id} has inputs: give inputsDir (the folder holding them by name)`);
      const { inputsDir, ...rest } = o;
      return execute(ws, { action, door: 'library', inputsDir: inputsDir ?? ws.inputs, ...rest });
    },
    approve(file, o = {}) {
      const now = new Date();
      const by = o.operator ?? operator;
      const prepared = prepareApproval(resolve(file), by, now);
      if (!prepared.ok) return prepared;
      const done = commitApproval({ file: resolve(file), prepared: prepared.value, operator: by, keyDir: keys, ws, now });
      return done.ok ? { ok: true, requestId: prepared.value.request.frontMatter.request_id, file: done.dest } : done;
    },
    confirm: (sandboxId, o = {}) => confirm(ws, sandboxId, { operator: o.operator ?? operator, keyDir: keys }),
    promote: (sandboxId, o = {}) => promote(ws, sandboxId, { ...o, actor: operator }),
    rollback: (sandboxId, o = {}) => rollback(ws, sandboxId, { ...o, actor: operator }),
    async callTool(o) {
      const url = opts.nats;
      if (url === undefined) return { ok: false, toolCallId: o.toolCallId ?? '', problems: [{ code: 'UTPC_BAD_INPUT', message: 'callTool needs NATS: openAirlock({ nats: "nats://host:4222" })' }] };
      if (closed) return { ok: false, toolCallId: o.toolCallId ?? '', problems: [{ code: 'UTPC_BAD_INPUT', message: 'this Airlock was closed' }] };
      // One connection and one store for every call of this object, opened on first use.
      nats ??= connectNats(url, { name: 'airlock-library' });
      store ??= openStore(opts.db, ws.root);
      return callTool({ ...o, nats: await nats, store: await store });
    },
    async close() {
      closed = true;
      const [n, s] = [nats, store];
      nats = store = undefined;
      // A connection or store that failed to open has nothing to close.
      await Promise.all([
        n?.then((c) => c.close(), () => undefined),
        s?.then((x) => x.close(), () => undefined),
        closeLanes(),
      ]);
    },
  };
}
