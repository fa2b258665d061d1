import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { askYesNo } from './terminal.js';
import { parseDocument } from 'yaml';
import { generateOperatorKey, keyDir, loadOperatorKey, privateKeyFile } from '../approval/keys.js';
import { openAuditLog } from '../audit/log.js';
import { approvalSummary, commitApproval, prepareApproval } from '../gates/approve.js';
import { gateLog } from '../gates/log.js';
import { serveGate } from '../gates/service.js';
import { formatStatus, gateStatus } from '../gates/status.js';
import { loadPolicy } from '../policy/load.js';
import { addOperatorToPolicy } from '../policy/operators.js';
import { parsePolicy } from '../policy/policy.js';
import { openWorkspace, workspacePaths, type Workspace } from '../workspace/workspace.js';

const printProblems = (file: string, problems: { code: string; message: string; line?: number; path?: string }[]) => {
  for (const p of problems) process.stderr.write(`${file}:${p.line ?? 1}: ${p.code}: ${p.message}${p.path ? ` [${p.path}]` : ''}\n`);
};

export function initCommand(dir: string | undefined): number {
  const existed = existsSync(workspacePaths(dir).policyFile);
  const ws = openWorkspace(dir, { init: true });
  const lines = [
    `${existed ? 'workspace already set up' : 'created workspace'} ${ws.root}`,
    `  policy.yaml     the host policy (${existed ? 'kept as it was' : 'safe defaults'}); check it with \`airlock policy check\``,
    '  drafts/         where the AI drafts TR-*.md requests (with their input files beside them)',
    '  requests_in/    approved requests waiting for `airlock serve`',
    '  results_out/    Tool Results before their validation',
    '  inbound/        validated results the AI may read',
    '  quarantine/     rejected requests and results, each with <name>.reasons.json',
    '  inputs/, runs/, tombstones/, store/, audit/   input store, run records, pre-images, replay ledger, audit log',
    'next:',
    `  airlock keygen --operator YOUR_NAME --workspace ${ws.root}`,
    `  airlock approve ${join(ws.drafts, 'TR-....md')} --operator YOUR_NAME --workspace ${ws.root}`,
    `  airlock serve --workspace ${ws.root} --once`,
  ];
  process.stdout.write(lines.join('\n') + '\n');
  return 0;
}

export function policyCheckCommand(opts: { workspace?: string; file?: string; json?: boolean }): number {
  const file = opts.file ? resolve(opts.file) : workspacePaths(opts.workspace).policyFile;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    process.stderr.write(`${file}: cannot read (${(e as NodeJS.ErrnoException).code ?? e})\n`);
    return 2;
  }
  const r = parsePolicy(text);
  if (opts.json) process.stdout.write(JSON.stringify({ file, valid: r.ok, problems: r.ok ? [] : r.problems }, null, 2) + '\n');
  else if (r.ok) process.stdout.write(`${file}: valid policy (${r.value.operators.length} operator${r.value.operators.length === 1 ? '' : 's'})\n`);
  else {
    for (const p of r.problems) process.stdout.write(`${file}:${p.line ?? 1}: ${p.code}: ${p.message}\n`);
    process.stdout.write(`${file}: INVALID policy (${r.problems.length} problem${r.problems.length === 1 ? '' : 's'})\n`);
  }
  return r.ok ? 0 : 2;
}

/** The public key policy.yaml holds for `name`, or null when it lists no such operator. */
function policyKeyOf(ws: Workspace, name: string): string | null {
  const ops = parseDocument(readFileSync(ws.policyFile, 'utf8'), { logLevel: 'error' }).toJS()?.operators as { name?: unknown; public_key?: unknown }[] | undefined;
  const found = Array.isArray(ops) ? ops.find((o) => o?.name === name) : undefined;
  return found ? String(found.public_key) : null;
}

/**
 * `keygen --operator NAME` is safe to run again, as a user following the README expects: an existing
 * private key is never replaced; when the policy already trusts it nothing changes (exit 0), when
 * this workspace does not list the operator yet its existing public key is added (a second
 * workspace, exit 0). Only a policy that lists NAME with another key is refused (exit 2).
 */
export function keygenCommand(opts: { operator: string; workspace?: string; keyDir?: string }): number {
  if (!/^[a-z0-9][a-z0-9._-]{0,63}$/.test(opts.operator)) {
    process.stderr.write(`operator name ${JSON.stringify(opts.operator)} must be lowercase letters, digits, '.', '_' or '-'\n`);
    return 2;
  }
  const ws = openWorkspace(opts.workspace);
  const dir = keyDir(opts.keyDir);
  const inPolicy = policyKeyOf(ws, opts.operator);
  const file = privateKeyFile(dir, opts.operator);
  let publicKey: string;
  let made = false;
  if (existsSync(file)) {
    const loaded = loadOperatorKey(opts.operator, dir);
    if ('error' in loaded) {
      process.stderr.write(`${loaded.error}\n`);
      return 2;
    }
    publicKey = loaded.publicKey;
  } else {
    if (inPolicy !== null) {
      process.stderr.write(`operator ${opts.operator} is already in ${ws.policyFile} with a key that is not in ${dir}; remove that entry first to give ${opts.operator} a new key (or point --key-dir at the key)\n`);
      return 2;
    }
    const generated = generateOperatorKey(opts.operator, dir);
    if ('error' in generated) {
      process.stderr.write(`${generated.error}\n`);
      return 2;
    }
    publicKey = generated.publicKey;
    made = true;
  }
  if (inPolicy === publicKey) {
    process.stdout.write(`${opts.operator}'s key already exists (${file}) and ${ws.policyFile} already trusts it: nothing to do\n`);
    return 0;
  }
  if (inPolicy !== null) {
    process.stderr.write(`operator ${opts.operator} is in ${ws.policyFile} with another public key than ${file}'s; remove that entry first to trust this key\n`);
    return 2;
  }
  const err = addOperatorToPolicy(ws.policyFile, opts.operator, publicKey);
  if (err) {
    process.stderr.write(`${err}\n(the private key is at ${file})\n`);
    return 2;
  }
  openAuditLog(ws.auditFile).append({ type: 'operator_added', actor: opts.operator, detail: { public_key: publicKey } });
  const keyLine = made ? `private key: ${file} (owner-only; keep it with ${opts.operator}, outside the workspace)` : `private key: ${file} (already there; kept)`;
  process.stdout.write(`${keyLine}\npublic key:  ${publicKey} added to ${ws.policyFile}\n`);
  return 0;
}

export async function approveCommand(file: string, opts: { operator: string; workspace?: string; keyDir?: string; yes?: boolean }): Promise<number> {
  const ws = openWorkspace(opts.workspace);
  const now = new Date();
  const prepared = prepareApproval(resolve(file), opts.operator, now);
  if (!prepared.ok) {
    printProblems(file, prepared.problems);
    process.stderr.write(`${file}: not approved (${prepared.problems.length} problem${prepared.problems.length === 1 ? '' : 's'})\n`);
    return 2;
  }
  process.stdout.write(approvalSummary(prepared.value.request));
  const answer = opts.yes ? 'yes' : await askYesNo(`Approve and sign as ${opts.operator}?`);
  if (answer === 'no-terminal') {
    process.stderr.write('not approved: no terminal to confirm on; pass --yes to approve from a script\n');
    return 2;
  }
  if (answer === 'no') {
    process.stdout.write('not approved\n');
    return 2;
  }
  const done = commitApproval({ file: resolve(file), prepared: prepared.value, operator: opts.operator, keyDir: keyDir(opts.keyDir), ws, now });
  if (!done.ok) {
    printProblems(file, done.problems);
    return 2;
  }
  process.stdout.write(`approved and signed by ${opts.operator}: ${done.dest}\n`);
  return 0;
}

export async function serveCommand(opts: { workspace?: string; once?: boolean; logFormat?: string }): Promise<number> {
  const ws = openWorkspace(opts.workspace);
  const log = gateLog(opts.logFormat === 'json' ? 'json' : 'text');
  const audit = openAuditLog(ws.auditFile);
  // Retention follows the policy; pruning keeps the chain verifiable (an anchor and a `pruned` record).
  // A missing or invalid policy stops nothing here: every request is then refused (and quarantined) by the host core.
  const policy = loadPolicy(ws.policyFile);
  if (policy.ok) {
    const pruned = audit.prune(policy.value.retention.audit_days);
    if (pruned.pruned > 0) log.info('audit_pruned', { removed: pruned.pruned }, `audit log: ${pruned.pruned} records older than ${policy.value.retention.audit_days} days pruned (rule retention.audit_days)`);
  }
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  if (!opts.once) log.info('serving', { workspace: ws.root }, `airlock serve: watching ${ws.requestsIn} (Ctrl-C to stop)`);
  // A long-lived gate keeps Monty workers warm when the policy lets that lane run, and ns sandboxes.
  const lanes = opts.once ? null : await import('../pipeline/warm.js');
  lanes?.warmLanes({ monty: !policy.ok || policy.value.lanes.includes('monty') });
  const r = await serveGate({ ws, log, audit, once: Boolean(opts.once), signal: stop.signal });
  await lanes?.closeLanes();
  log.info('done', { processed: r.processed }, `airlock serve: ${r.processed} request${r.processed === 1 ? '' : 's'} processed`);
  return 0;
}

export function statusCommand(opts: { workspace?: string; json?: boolean }): number {
  const s = gateStatus(openWorkspace(opts.workspace));
  process.stdout.write(opts.json ? JSON.stringify(s, null, 2) + '\n' : formatStatus(s));
  return 0;
}

/** `airlock demo`: a fresh workspace, a demo operator, the bundled examples approved and served once. */
export async function demoCommand(opts: { workspace?: string }): Promise<number> {
  const root = opts.workspace ? resolve(opts.workspace) : mkdtempSync(join(tmpdir(), 'airlock-demo-'));
  const keys = mkdtempSync(join(tmpdir(), 'airlock-demo-keys-'));
  const examples = resolve(dirname(process.argv[1] ?? '.'), '..', '..', 'examples', 'requests');
  process.stdout.write(`== airlock demo: workspace ${root}\n`);
  initCommand(root);
  process.stdout.write(`== an operator key (private key in ${keys}, outside the workspace)\n`);
  if (keygenCommand({ operator: 'demo', workspace: root, keyDir: keys }) !== 0) return 3;
  const ws = openWorkspace(root);
  for (const f of readdirSync(examples)) copyFileSync(join(examples, f), join(ws.drafts, f));
  const bundled = readdirSync(ws.drafts).filter((n) => n.startsWith('TR-') && n.endsWith('.md')).sort();
  for (const f of bundled) {
    process.stdout.write(`== approve drafts/${f}\n`);
    if ((await approveCommand(join(ws.drafts, f), { operator: 'demo', workspace: root, keyDir: keys, yes: true })) !== 0) return 3;
  }
  process.stdout.write('== airlock serve --once\n');
  await serveCommand({ workspace: root, once: true });
  process.stdout.write('== where each result went (airlock status)\n');
  statusCommand({ workspace: root });
  process.stdout.write(`read a result:  cat ${ws.inbound}/TS-*.md\naudit log:      airlock audit verify --workspace ${root}\n`);
  // Every bundled request is one that should pass: a demo that quarantined any of them failed.
  const expected = bundled.length;
  const inbound = readdirSync(ws.inbound);
  const passed = bundled.filter((f) => inbound.some((n) => n.startsWith('TS-') && n.endsWith(`-${f}`))).length;
  if (passed < expected) {
    const held = readdirSync(ws.quarantine).filter((n) => n.endsWith('.md'));
    process.stderr.write(
      `airlock demo: FAILED: ${expected - passed} of ${expected} bundled requests, all expected to pass, did not reach inbound/` +
        `${held.length ? ` (quarantined: ${held.join(', ')}; the reasons are beside them in ${ws.quarantine})` : ''}.\n` +
        'Run `airlock doctor`: its last line says whether runs can pass on this host and how to fix it.\n',
    );
    return 1;
  }
  return 0;
}
