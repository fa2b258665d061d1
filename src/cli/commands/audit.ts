import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';

/**
 * `airlock audit verify` and `airlock audit show`. Registration is cheap; the log's code is loaded
 * inside the handlers, so other commands' start-up does not pay for it.
 *
 * Exit codes: verify 0 intact, 2 problems found, 3 unreadable (or a usage error); show 0, 3 unreadable.
 */

const ISO_RE = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/;

/** `--since` / `--until`: a date (`2026-02-09`, UTC midnight) or a full ISO time with a zone. */
function isoTime(value: string): Date {
  const t = ISO_RE.test(value) ? Date.parse(value) : NaN;
  if (Number.isNaN(t)) throw new InvalidArgumentError('expected an ISO date or time with a zone, e.g. 2026-02-09 or 2026-02-09T16:05:00Z');
  return new Date(t);
}

/** Terminal-safe text: record fields can hold data that came from a sandboxed program. */
const safe = (s: string): string => s.replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

interface VerifyOpts {
  workspace?: string;
  json?: boolean;
  repair?: boolean;
}

interface ShowOpts {
  workspace?: string;
  request?: string;
  action?: string;
  sandbox?: string;
  type?: string;
  since?: Date;
  until?: Date;
  json?: boolean;
}

async function logFile(workspace: string | undefined): Promise<{ root: string; file: string } | undefined> {
  const { workspaceRoot, refuseUnsafe } = await import('../../workspace/workspace.js');
  const root = workspaceRoot(workspace);
  if (!existsSync(root)) {
    process.stderr.write(`airlock: no workspace at ${root}; run \`airlock init\` or pass --workspace DIR\n`);
    return undefined;
  }
  refuseUnsafe(root); // what it reads (and --repair writes) is the workspace's: WS_NOT_PRIVATE where another user could plant it
  return { root, file: join(root, 'audit', 'audit.jsonl') };
}

async function verifyAction(opts: VerifyOpts): Promise<number> {
  const where = await logFile(opts.workspace);
  if (!where) return 2; // bad input: no such workspace
  const { openAuditLog, AuditError } = await import('../../audit/index.js');
  const log = openAuditLog(where.file);
  const out: string[] = [];
  let report;
  try {
    if (opts.repair) {
      const r = log.repair();
      if (r.quarantined) out.push(`moved an incomplete last record (${r.quarantined.bytes} bytes, sha256 ${r.quarantined.sha256}) to ${r.quarantined.file}`);
      if (r.headUpdated) out.push('brought the head file up to date with the last record');
      if (r.record) out.push(`recorded the repair as seq ${r.record.seq}`);
      if (r.recordError) out.push(`could not record the repair in the log: ${r.recordError}`);
      if (!r.quarantined && !r.headUpdated) out.push('nothing to repair (only an interrupted append or a lagging head file can be repaired)');
      report = r.report;
    } else {
      report = log.verify();
    }
  } catch (e) {
    if (!(e instanceof AuditError)) throw e;
    process.stderr.write(`airlock: ${e.message}\n`);
    return 3;
  }
  const unreadable = report.problems.some((p) => p.code === 'AUDIT_UNREADABLE');
  if (opts.json) {
    process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  } else {
    for (const line of out) process.stderr.write(`${line}\n`);
    const span = report.firstSeq !== undefined ? ` (seq ${report.firstSeq}..${report.lastSeq})` : '';
    const anchored = report.anchor ? `, pruned up to seq ${report.anchor.seq} (${report.anchor.pruned_total} records removed by retention)` : '';
    if (report.ok) {
      process.stdout.write(report.records === 0 && !report.anchor ? `audit log ${report.file}: no records yet\n` : `audit log ${report.file}: intact, ${report.records} records${span}${anchored}\n`);
    } else {
      const lines = [`audit log ${report.file}: ${report.problems.length} problem(s) in ${report.records} records${span}${anchored}`];
      for (const p of report.problems) lines.push(`  line ${p.line}${p.seq !== undefined ? ` seq ${p.seq}` : ''}  ${p.code}  ${p.message}`);
      lines.push('see docs/audit.md for what each code means; the log is evidence: do not edit it to make this pass');
      process.stdout.write(lines.join('\n') + '\n');
    }
  }
  return unreadable ? 3 : report.ok ? 0 : 2;
}

async function showAction(opts: ShowOpts): Promise<number> {
  const where = await logFile(opts.workspace);
  if (!where) return 2; // bad input: no such workspace
  const { openAuditLog } = await import('../../audit/index.js');
  let records;
  try {
    records = openAuditLog(where.file).show({
      ...(opts.request !== undefined ? { request: opts.request } : {}),
      ...(opts.action !== undefined ? { action: opts.action } : {}),
      ...(opts.sandbox !== undefined ? { sandbox: opts.sandbox } : {}),
      ...(opts.type !== undefined ? { type: opts.type } : {}),
      ...(opts.since !== undefined ? { since: opts.since } : {}),
      ...(opts.until !== undefined ? { until: opts.until } : {}),
    });
  } catch (e) {
    process.stderr.write(`airlock: cannot read the audit log ${where.file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}\n`);
    return 3;
  }
  if (opts.json) {
    process.stdout.write(JSON.stringify(records, null, 2) + '\n');
    return 0;
  }
  const lines = records.map((r) => {
    const ids = [
      r.request_id !== undefined ? `request=${r.request_id}` : '',
      r.action_id !== undefined ? `action=${r.action_id}` : '',
      r.sandbox_id !== undefined ? `sandbox=${r.sandbox_id}` : '',
      r.actor !== undefined ? `actor=${JSON.stringify(r.actor)}` : '',
    ].filter(Boolean);
    const detail = r.detail !== undefined ? ` ${JSON.stringify(r.detail)}` : '';
    return safe(`#${r.seq} ${r.ts} ${r.type}${ids.length ? ' ' + ids.join(' ') : ''}${detail}`);
  });
  process.stdout.write(lines.length ? lines.join('\n') + '\n' : 'no matching records\n');
  return 0;
}

export function registerAuditCommands(program: Command): void {
  const audit = program.command('audit').description('the hash-chained audit log: verify it, show records');
  audit
    .command('verify')
    .description('check the audit log: finds edited, removed, reordered, duplicated and truncated records and names each (exit 0 intact, 2 problems, 3 unreadable)')
    .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
    .option('--json', 'print the report as JSON')
    .option('--repair', 'first move an incomplete last record (an interrupted append) to a quarantine file beside the log; nothing is deleted')
    .action(async (opts: VerifyOpts) => {
      process.exitCode = await verifyAction(opts);
    });
  audit
    .command('show')
    .description('print audit records, filtered (does not verify: run `airlock audit verify` for that)')
    .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
    .option('--request <id>', 'only records of this request_id')
    .option('--action <id>', 'only records of this action_id')
    .option('--sandbox <id>', 'only records of this sandbox_id')
    .option('--type <type>', 'only records of this type (e.g. approved, quarantined)')
    .option('--since <iso>', 'only records at or after this time', isoTime)
    .option('--until <iso>', 'only records at or before this time', isoTime)
    .option('--json', 'print the records as a JSON array')
    .action(async (opts: ShowOpts) => {
      process.exitCode = await showAction(opts);
    });
}
