import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { callOfSummary, canonical } from '../../approval/utp-call.js';
import { inertLine } from '../../base/inert-line.js';
import type { ToolRecord } from '../../store/types.js';

/**
 * `airlock tools add|list|sign|retire|remove`, `airlock approvals [list|approve|reject]`, `airlock calls cancel` and the body of
 * `airlock serve --nats URL`. Everything heavy (stores, NATS, the sandbox) is imported inside the
 * handlers: registering these commands costs nothing at CLI start-up.
 *
 * Exit codes: 0 done; 2 the input was refused (problems printed); 3 usage error, a service that is
 * down, or an internal error.
 */

interface StoreOpts {
  db?: string;
  workspace?: string;
}

const storeOptions = (c: Command): Command =>
  c
    .option('--db <db>', 'postgres://user@host/db[?schema=name], or a SQLite file (default: <workspace>/airlock.db)')
    .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)');

async function withStore<T>(opts: StoreOpts, f: (store: import('../../store/types.js').Store) => Promise<T>): Promise<T | undefined> {
  const { workspaceRoot, refuseUnsafe } = await import('../../workspace/workspace.js');
  const { openStore } = await import('../../store/open.js');
  // The default store is the workspace's airlock.db: refused where another user could plant it (WS_NOT_PRIVATE).
  if (opts.db === undefined || !/^postgres(ql)?:\/\//i.test(opts.db)) refuseUnsafe(workspaceRoot(opts.workspace));
  let store;
  try {
    store = await openStore(opts.db, workspaceRoot(opts.workspace));
  } catch (e) {
    process.stderr.write(`airlock: ${(e as Error).message}\n`);
    process.exitCode = 3;
    return undefined;
  }
  try {
    return await f(store);
  } finally {
    await store.close();
  }
}

/** `--parameters` / `--options`: inline JSON, or `@file`. */
async function readJsonArg(value: string, what: string): Promise<{ value: Record<string, unknown> } | { error: string }> {
  let text = value;
  if (value.startsWith('@')) {
    try {
      text = readFileSync(value.slice(1), 'utf8');
    } catch (e) {
      return { error: `cannot read ${what} file ${value.slice(1)}: ${(e as NodeJS.ErrnoException).code ?? e}` };
    }
  }
  const { parseJsonDocument } = await import('../../contracts/json-doc.js');
  const doc = parseJsonDocument(text);
  if (!doc.ok) return { error: `${what}: ${doc.problems.map((p) => `${p.code} ${p.message}`).join('; ')}` };
  const v = doc.value.data;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { error: `${what} must be a JSON object` };
  return { value: v as Record<string, unknown> };
}

const fail = (message: string, code = 2): void => {
  process.stderr.write(`airlock: ${message}\n`);
  process.exitCode = code;
};

export function registerUtpCommands(program: Command): void {
  const tools = program.command('tools').description('the UTP tool registry (resource.tools): what `airlock serve --nats` serves');

  storeOptions(
    tools
      .command('add')
      .description('register (or replace) a tool: project, name, subject, parameters (JSON Schema), after_execution, options')
      .argument('<name>', 'tool_name, e.g. python.run')
      .requiredOption('--project <id>', 'project_id (a subject token)')
      .option('--subject <subject>', 'target_subject: cg.<ver>.<project>.<channel>.cmd.tool.<target>...')
      .option('--channel <id>', 'with --project: use the default subject cg.<ver>.<project>.<channel>.cmd.tool.<name>')
      .option('--ver <ver>', 'subject version for --channel', 'v1')
      .option('--builtin <tool>', 'start from a built-in tool: python.run, sandbox.exec, echo')
      .option('--description <text>', 'what the tool does (shown to agents)')
      .option('--parameters <json>', 'JSON Schema of the arguments (inline JSON or @file)')
      .option('--options <json>', 'how Airlock runs it (inline JSON or @file; see docs/utp-service.md)')
      .option('--after-execution <mode>', 'suspend | terminate')
      .requiredOption('--operator <name>', 'the operator who signs the registration (workers run only tools signed by a key their policy lists: `airlock keygen`)')
      .option('--key-dir <dir>', 'where the operator\'s private key is (default: $AIRLOCK_KEYS or ~/.config/airlock/keys)'),
  ).action(
    async (
      name: string,
      o: StoreOpts & { project: string; subject?: string; channel?: string; ver: string; builtin?: string; description?: string; parameters?: string; options?: string; afterExecution?: string; operator: string; keyDir?: string },
    ) => {
      const { BUILTIN_TOOLS, checkToolRecord, defaultToolSubject } = await import('../../utp/tools.js');
      const base = o.builtin === undefined ? undefined : BUILTIN_TOOLS[o.builtin];
      if (o.builtin !== undefined && !base) return fail(`unknown built-in ${o.builtin}; built-ins: ${Object.keys(BUILTIN_TOOLS).join(', ')}`, 3);
      if (!o.subject && !o.channel) return fail('give --subject, or --channel to use the default subject', 3);
      const parameters = o.parameters === undefined ? base?.parameters : await readJsonArg(o.parameters, '--parameters');
      const options = o.options === undefined ? base?.options : await readJsonArg(o.options, '--options');
      for (const x of [parameters, options]) if (x && 'error' in x) return fail(String(x.error));
      const pick = (x: unknown) => (x && typeof x === 'object' && 'value' in x ? (x as { value: Record<string, unknown> }).value : (x as Record<string, unknown> | undefined));
      const record = {
        project_id: o.project,
        tool_name: name,
        description: o.description ?? base?.description ?? '',
        parameters: pick(parameters) ?? { type: 'object' },
        target_subject: o.subject ?? defaultToolSubject(o.ver, o.project, o.channel as string, name),
        after_execution: (o.afterExecution ?? base?.after_execution ?? 'suspend') as 'suspend' | 'terminate',
        options: pick(options) ?? {},
      };
      const checked = checkToolRecord(record);
      if (!checked.ok) {
        for (const p of checked.problems) process.stderr.write(`${p.code} ${p.path ?? ''}: ${p.message}\n`);
        process.exitCode = 2;
        return;
      }
      const signed = await signToolRecord(record, o);
      if ('error' in signed) return fail(signed.error);
      await withStore(o, async (store) => {
        await store.upsertTool(signed.record);
        process.stdout.write(`registered ${record.project_id}/${record.tool_name} on ${record.target_subject}, signed by ${o.operator} (key ${signed.keyId})\n${signed.pin}`);
      });
    },
  );

  storeOptions(
    tools
      .command('list')
      .description('list registered tools')
      .option('--project <id>', 'only this project')
      .option('--json', 'print JSON'),
  ).action(async (o: StoreOpts & { project?: string; json?: boolean }) => {
    await withStore(o, async (store) => {
      const rows = await store.listTools(o.project);
      if (o.json) return void process.stdout.write(JSON.stringify(rows, null, 2) + '\n');
      if (rows.length === 0) return void process.stdout.write('no tools registered (airlock tools add --builtin python.run ...)\n');
      const { openWorkspace } = await import('../../workspace/workspace.js');
      const { loadPolicy } = await import('../../policy/load.js');
      const { verifyRegistration } = await import('../../approval/tool-registration.js');
      const { inertLine } = await import('../../base/inert-line.js');
      const policy = loadPolicy(openWorkspace(o.workspace).policyFile);
      for (const t of rows) {
        // As a client wrote it: not necessarily an object (JSON null), so read with care.
        const opts = (t.options ?? {}) as { runner?: unknown; approval?: { required?: unknown } | null; retired?: unknown };
        const v = policy.ok ? verifyRegistration(t, policy.value) : undefined;
        const by = !v ? '  signature=not checked (no valid policy.yaml)' : v.ok ? `  signed=${v.value.operator}` : `  REFUSED=${v.problems.map((p) => p.code).join(',')}`;
        // Every text as a client may have written it (a newline would print a line of its own: a fake `signed=`).
        const line = `${t.project_id}/${t.tool_name}  ${t.target_subject}  runner=${typeof opts.runner === 'string' ? opts.runner : '?'}  after=${t.after_execution}${opts.approval?.required ? '  approval=required' : ''}${opts.retired === true ? '  RETIRED' : ''}`;
        process.stdout.write(`${inertLine(line)}${by}\n`);
      }
    });
  });

  storeOptions(
    tools
      .command('sign')
      .description('sign a registered tool as it stands in the store (a row from before signed registrations, say): shows it, then asks y/N')
      .argument('<name>', 'tool_name')
      .requiredOption('--project <id>', 'project_id')
      .requiredOption('--operator <name>', 'the operator who signs (their key in the workspace policy: `airlock keygen`)')
      .option('--key-dir <dir>', 'where the operator\'s private key is (default: $AIRLOCK_KEYS or ~/.config/airlock/keys)')
      .option('--yes', 'sign without asking (for scripts: read the row with `tools list --json` first)'),
  ).action(async (name: string, o: StoreOpts & { project: string; operator: string; keyDir?: string; yes?: boolean }) => {
    const { checkToolRecord } = await import('../../utp/tools.js');
    const { askYesNo } = await import('../terminal.js');
    await withStore(o, async (store) => {
      const row = await store.getTool(o.project, name);
      if (!row) return fail(`no tool ${o.project}/${name}`);
      const checked = checkToolRecord(row);
      if (!checked.ok) return fail(`${o.project}/${name} is not a valid tool row, so it is not signed:\n${checked.problems.map((p) => `  ${p.code} ${p.path ?? ''}: ${p.message}`).join('\n')}`);
      // Anyone with the store may have written this row: the operator signs only what is shown here,
      // and exactly that is written back (a change made meanwhile is overwritten, not signed).
      process.stdout.write(shownTool(row));
      const answer = o.yes ? 'yes' : await askYesNo(`Sign ${o.project}/${name} as ${o.operator}, so that workers run it as shown?`);
      if (answer !== 'yes') return fail(answer === 'no' ? 'not signed' : 'not signed: no terminal to ask on; read the row (`tools list --json`), then pass --yes to sign from a script');
      const signed = await signToolRecord(row, o);
      if ('error' in signed) return fail(signed.error);
      await store.upsertTool(signed.record);
      process.stdout.write(`signed ${o.project}/${name} as ${o.operator} (key ${signed.keyId})\n${signed.pin}`);
    });
  });

  storeOptions(
    tools
      .command('retire')
      .description('withdraw a tool for good: a signed tombstone in its place, so workers never run it again (remove only deletes the row, which a client can write back)')
      .argument('<name>', 'tool_name')
      .requiredOption('--project <id>', 'project_id')
      .requiredOption('--operator <name>', 'the operator who signs the tombstone (their key in the workspace policy)')
      .option('--key-dir <dir>', 'where the operator\'s private key is (default: $AIRLOCK_KEYS or ~/.config/airlock/keys)'),
  ).action(async (name: string, o: StoreOpts & { project: string; operator: string; keyDir?: string }) => {
    await withStore(o, async (store) => {
      const row = await store.getTool(o.project, name);
      if (!row) return fail(`no tool ${o.project}/${name}`);
      // The row's identity stays (its subject keeps being answered); only what it runs goes.
      const tombstone: ToolRecord = { ...row, description: `retired: ${String(row.description).slice(0, 1900)}`, options: { runner: 'echo', retired: true }, signature: null };
      const signed = await signToolRecord(tombstone, o);
      if ('error' in signed) return fail(signed.error);
      await store.upsertTool(signed.record);
      process.stdout.write(`retired ${o.project}/${name}, signed by ${o.operator} (key ${signed.keyId}): workers answer its calls UTPS_TOOL_RETIRED, and refuse an older registration put back (UTPS_TOOL_ROLLBACK)\n${signed.pin}`);
    });
  });

  storeOptions(tools.command('remove').description('delete a tool row (no revocation: a client can write a signed row back; `tools retire` withdraws a tool)').argument('<name>', 'tool_name').requiredOption('--project <id>', 'project_id')).action(
    async (name: string, o: StoreOpts & { project: string }) => {
      await withStore(o, async (store) => {
        if (await store.removeTool(o.project, name)) process.stdout.write(`removed ${o.project}/${name}\n`);
        else fail(`no tool ${o.project}/${name}`);
      });
    },
  );

  const approvals = program.command('approvals').description('calls of tools whose options require a person\'s approval');
  /** Arguments as JSON, whole up to ARGS_SHOWN characters; past that, cut with a marker saying so. */
  const shownInFull = (args: unknown): string => {
    const text = JSON.stringify(args ?? {});
    return text.length <= ARGS_SHOWN ? text : `${text.slice(0, ARGS_SHOWN)}… [CUT: ${ARGS_SHOWN} of ${text.length} characters shown; \`airlock approvals list --json\` prints the whole call]`;
  };
  /** What `approve` would sign (the row's call, not its display copies), and a warning when they disagree. */
  const callLines = (summary: Record<string, unknown>): string => {
    const call = callOfSummary(summary);
    if (!call) return '  NO CALL TO SIGN: this row does not carry the call it approves; reject it\n';
    const altered = (['arguments', 'agent_id', 'subject'] as const).filter((k) => k in summary && canonical(summary[k]) !== canonical(call[k]));
    return (
      `  agent ${call.agent_id} on ${call.subject}\n  arguments: ${shownInFull(call.arguments)}\n` +
      (altered.length > 0 ? `  WARNING: the row's display copy of ${altered.join(', ')} differs from the call: the row was changed in the store; approve refuses it, reject it\n` : '')
    );
  };
  const list = async (o: StoreOpts & { all?: boolean; json?: boolean }) => {
    await withStore(o, async (store) => {
      const rows = await store.listApprovals(o.all ? undefined : 'pending');
      if (o.json) return void process.stdout.write(JSON.stringify(rows, null, 2) + '\n');
      if (rows.length === 0) return void process.stdout.write(o.all ? 'no approvals\n' : 'nothing waits for approval\n');
      for (const a of rows) {
        const left = Math.max(0, Math.round((a.expires_at - Date.now()) / 1000));
        process.stdout.write(`${a.id}  ${a.state}  ${a.project_id}/${a.tool_name}  call ${a.tool_call_id}${a.state === 'pending' ? `  expires in ${left}s` : ''}\n${callLines(a.summary)}`);
      }
    });
  };
  // `list` is the default subcommand (options live on subcommands only: commander gives an option
  // defined on both a parent and its subcommand to the parent).
  storeOptions(approvals.command('list', { isDefault: true }).description('list pending approvals').option('--all', 'include decided ones').option('--json', 'print JSON')).action(list);
  storeOptions(
    approvals
      .command('approve')
      .description('let the call run: signs the exact call with your operator key (the workers verify the signature before running)')
      .argument('<id>', 'approval id (apr-...)')
      .requiredOption('--operator <name>', 'the approving operator (their key must be in the policy: `airlock keygen`)')
      .option('--key-dir <dir>', 'where the operator\'s private key is (default: $AIRLOCK_KEYS or ~/.config/airlock/keys)')
      .option('--reason <text>', 'why'),
  ).action(async (id: string, o: StoreOpts & { operator: string; keyDir?: string; reason?: string }) => {
    const { openWorkspace } = await import('../../workspace/workspace.js');
    const { loadPolicy } = await import('../../policy/load.js');
    const { keyDir } = await import('../../approval/keys.js');
    const { signUtpApproval } = await import('../../approval/sign-utp.js');
    const { openAuditLog } = await import('../../audit/index.js');
    const ws = openWorkspace(o.workspace);
    const policy = loadPolicy(ws.policyFile);
    if (!policy.ok) return fail(`the policy ${ws.policyFile} is missing or invalid (${policy.problems.map((p) => p.code).join(', ')}): its operator keys decide who may approve`);
    await withStore(o, async (store) => {
      const row = await store.getApproval(id);
      if (!row) return fail(`no approval ${id}`);
      if (row.state !== 'pending') return fail(`${id} is already ${row.state}`);
      const signed = signUtpApproval({ row, operator: o.operator, keyDir: keyDir(o.keyDir), policy: policy.value, now: new Date() });
      if (!signed.ok) return fail(`${id} not approved:\n${signed.problems.map((p) => `  ${p.code}: ${p.message}`).join('\n')}`);
      if (!(await store.decideApproval(id, 'approved', o.operator, o.reason ?? null, signed.signature))) {
        const a = await store.getApproval(id);
        return fail(a ? `${id} is already ${a.state}` : `no approval ${id}`);
      }
      const c = signed.call;
      openAuditLog(ws.auditFile).append({ type: 'approved', action_id: id, actor: o.operator, detail: { door: 'utp', approval_id: id, tool_name: c.tool_name, agent_id: c.agent_id, agent_turn_id: c.agent_turn_id, tool_call_id: c.tool_call_id, decision_source: `key:${o.operator}:${signed.keyId}` } });
      process.stdout.write(`approved ${id}: ${c.project_id}/${c.tool_name} for agent ${c.agent_id}, call ${c.tool_call_id}, signed by ${o.operator} (key ${signed.keyId})\n  arguments: ${shownInFull(c.arguments)}\n`);
    });
  });
  storeOptions(
    approvals
      .command('reject')
      .description('refuse the call (answered failed / auth_failed)')
      .argument('<id>', 'approval id (apr-...)')
      .option('--by <name>', 'who decides (default: $USER)')
      .option('--reason <text>', 'why'),
  ).action(async (id: string, o: StoreOpts & { by?: string; reason?: string }) => {
    await withStore(o, async (store) => {
      // A rejection needs no signature: it only stops a call (anyone with the store could fail it anyway).
      const done = await store.decideApproval(id, 'rejected', o.by ?? process.env.USER ?? null, o.reason ?? null);
      if (done) process.stdout.write(`rejected ${id}\n`);
      else {
        const a = await store.getApproval(id);
        fail(a ? `${id} is already ${a.state}` : `no approval ${id}`);
      }
    });
  });

  const calls = program.command('calls').description('UTP calls in flight');
  storeOptions(
    calls
      .command('cancel')
      .description('an operator\'s cancel of a running call (agents cancel their own calls over NATS)')
      .argument('<agent_turn_id>', 'the call\'s agent_turn_id')
      .argument('<tool_call_id>', 'the call\'s tool_call_id')
      .option('--by <name>', 'who cancels (default: $USER)'),
  ).action(async (agentTurnId: string, toolCallId: string, o: StoreOpts & { by?: string }) => {
    const { openWorkspace } = await import('../../workspace/workspace.js');
    const { openAuditLog } = await import('../../audit/index.js');
    await withStore(o, async (store) => {
      const anchor = { agent_turn_id: agentTurnId, tool_call_id: toolCallId };
      // The worker running it sees the request at its next heartbeat and stops the call (answered canceled).
      const c = await store.requestCancel(anchor);
      if (!c) return fail(`no call ${toolCallId} in turn ${agentTurnId} has been claimed by a worker`);
      if (c.state !== 'running') return fail(`call ${toolCallId} is already ${c.state}: nothing to cancel`);
      const by = o.by ?? process.env.USER ?? 'operator';
      openAuditLog(openWorkspace(o.workspace).auditFile).append({ type: 'cancel_requested', actor: by, detail: { door: 'utp', agent_turn_id: agentTurnId, tool_call_id: toolCallId, worker_id: c.worker_id } });
      process.stdout.write(`cancel requested for ${toolCallId} (worker ${c.worker_id} stops it at its next heartbeat)\n`);
    });
  });
}

/** A tool row as `tools sign` shows it before asking: every field, each line inert on a terminal. */
function shownTool(t: ToolRecord): string {
  const { approval } = t.options as { approval?: { required?: boolean } };
  const lines = [
    `${t.project_id}/${t.tool_name} on ${t.target_subject}, after_execution ${t.after_execution}`,
    `  approval by a person for each call: ${approval?.required ? 'required' : 'NOT required'}`,
    `  description: ${t.description}`,
    ...`  options: ${JSON.stringify(t.options, null, 2)}`.split('\n'),
    ...`  parameters: ${JSON.stringify(t.parameters, null, 2)}`.split('\n'),
  ];
  return lines.map((l) => inertLine(l)).join('\n') + '\n';
}

/**
 * Signs a tool row with the operator's key and checks it against this workspace's policy, so a key
 * the workers will not trust is reported here rather than as refused calls later.
 */
async function signToolRecord(record: ToolRecord, o: { operator: string; keyDir?: string; workspace?: string }): Promise<{ record: ToolRecord; keyId: string; pin: string } | { error: string }> {
  const { openWorkspace } = await import('../../workspace/workspace.js');
  const { loadPolicy } = await import('../../policy/load.js');
  const { keyDir, keyId, loadOperatorKey } = await import('../../approval/keys.js');
  const { pinLine, signRegistration, verifyRegistration } = await import('../../approval/tool-registration.js');
  const ws = openWorkspace(o.workspace);
  const policy = loadPolicy(ws.policyFile);
  if (!policy.ok) return { error: `the policy ${ws.policyFile} is missing or invalid (${policy.problems.map((p) => p.code).join(', ')}): its operator keys decide which registrations workers run` };
  const key = loadOperatorKey(o.operator, keyDir(o.keyDir));
  if ('error' in key) return { error: key.error };
  const signedRecord = { ...record, signature: signRegistration({ tool: record, operator: o.operator, key: key.key, publicKey: key.publicKey, now: new Date() }) };
  const v = verifyRegistration(signedRecord, policy.value);
  if (!v.ok) return { error: `${record.project_id}/${record.tool_name} not registered:\n${v.problems.map((p) => `  ${p.code}: ${p.message}`).join('\n')}` };
  // Workspaces that never served this registration would take an older one put back: the pin says no.
  const pin = `  so that no worker goes back to an older registration, add to each workspace's policy.yaml:\n    ${pinLine(record, v.value.signedAt)}\n`;
  return { record: signedRecord, keyId: keyId(key.publicKey), pin };
}

/** How much of a call's arguments `approvals list` and `approve` print before cutting (with a marker). */
const ARGS_SHOWN = 4000;

export interface ServeNatsOptions {
  /** NATS URL (nats://host:4222). */
  nats: string;
  /** postgres://... or a SQLite file; default <workspace>/airlock.db. */
  db?: string;
  workspace?: string;
  stream?: string;
  durable?: string;
  concurrency?: number;
  leaseMs?: number;
}

/**
 * `airlock serve --nats URL [--db ...] [--workspace DIR]`: serves the registered tools until
 * SIGINT/SIGTERM, then finishes the calls in flight. Logs are JSON lines on stderr. Returns the exit code.
 */
export async function serveNats(opts: ServeNatsOptions): Promise<number> {
  const { openWorkspace } = await import('../../workspace/workspace.js');
  const { openStore } = await import('../../store/open.js');
  const { connectNats } = await import('../../utp/connect.js');
  const { UtpService } = await import('../../utp/service.js');
  const ws = openWorkspace(opts.workspace);
  let store;
  let nc;
  try {
    store = await openStore(opts.db, ws.root);
    nc = await connectNats(opts.nats);
  } catch (e) {
    process.stderr.write(`airlock: ${(e as Error).message}\n`);
    await store?.close();
    return 3;
  }
  const service = new UtpService({
    nats: nc,
    store,
    workspace: ws,
    ...(opts.stream ? { stream: opts.stream } : {}),
    ...(opts.durable ? { durable: opts.durable } : {}),
    ...(opts.concurrency ? { concurrency: opts.concurrency } : {}),
    ...(opts.leaseMs ? { leaseMs: opts.leaseMs } : {}),
  });
  try {
    await service.start();
  } catch (e) {
    process.stderr.write(`airlock: ${(e as Error).message}\n`);
    await nc.close();
    await store.close();
    return 3;
  }
  const lanes = await import('../../pipeline/warm.js');
  lanes.warmLanes({ monty: true });
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await service.stop();
  await lanes.closeLanes();
  await nc.drain().catch(() => undefined);
  await store.close();
  return 0;
}
