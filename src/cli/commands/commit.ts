import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import type { Problem } from '../../base/problem.js';
import { askYesNo } from '../terminal.js';

/**
 * `airlock promote | confirm | rollback | recover | history` (docs/promotion.md). Registration is
 * cheap; the commit code is loaded inside the handlers.
 *
 * Exit codes: 0 done (or already in the asked state), 2 refused (a coded problem: nothing was
 * changed), 3 internal error, audit log refused, lock timeout, or a recovery that could not finish.
 */

const HARD = new Set(['COMMIT_LOCKED', 'COMMIT_AUDIT_FAILED', 'ROLLBACK_FAILED']);
/** Terminal-safe text: paths can hold anything a sandboxed program named a file. */
const safe = (s: string): string => s.replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

function refuse(what: string, problems: Problem[], json: boolean | undefined): number {
  if (json) process.stdout.write(JSON.stringify({ ok: false, problems }, null, 2) + '\n');
  for (const p of problems) process.stderr.write(`airlock ${what}: ${p.code}: ${safe(p.message)}\n`);
  return problems.some((p) => HARD.has(p.code)) ? 3 : 2;
}

interface Common {
  workspace?: string;
  json?: boolean;
}

async function ws(opts: Common) {
  const { openWorkspace } = await import('../../workspace/workspace.js');
  return openWorkspace(opts.workspace);
}

export function registerCommitCommands(program: Command): void {
  program
    .command('promote')
    .description('apply a sandbox run\'s verified filesystem diff to the real filesystem, once, all or nothing')
    .argument('<sandbox_id>', 'the run to promote (sbx-...)')
    .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
    .option('--json', 'machine-readable outcome')
    .action(async (sandboxId: string, opts: Common) => {
      const { promote } = await import('../../commit/promote.js');
      const out = await promote(await ws(opts), sandboxId, { actor: process.env.USER ?? 'operator' });
      if (!out.ok) return void (process.exitCode = refuse('promote', out.problems, opts.json));
      if (opts.json) {
        const body = out.status === 'force_rolled_back' ? { status: out.status, rolled_back: out.rolledBack.map((r) => ({ sandbox_id: r.sandboxId, ok: r.outcome.ok, problems: r.outcome.ok ? [] : r.outcome.problems })) } : { status: out.status, sandbox_id: out.journal.sandbox_id, action_id: out.journal.action_id, diff_sha256: out.journal.diff_sha256, changes: out.journal.ops.length, audit_seq: out.journal.audit?.promoted };
        process.stdout.write(JSON.stringify({ ok: true, ...body }, null, 2) + '\n');
      } else if (out.status === 'force_rolled_back') {
        process.stdout.write(`verdict FORCE_ROLLBACK: nothing promoted; ${out.rolledBack.length} live promotion(s) of this action rolled back by policy\n`);
        for (const r of out.rolledBack) process.stdout.write(`  ${r.sandboxId}: ${r.outcome.ok ? 'rolled back' : r.outcome.problems.map((p) => `${p.code}: ${safe(p.message)}`).join('; ')}\n`);
      } else if (out.status === 'already_promoted') {
        process.stdout.write(`${sandboxId} was already promoted at ${out.journal.applied_at} (audit seq ${out.journal.audit?.promoted}): nothing applied again\n`);
      } else {
        const j = out.journal;
        const n = (k: string) => j.ops.filter((o) => o.kind === k).length;
        process.stdout.write(`promoted ${sandboxId} (action ${j.action_id}): ${n('added')} added, ${n('modified')} modified, ${n('deleted')} deleted; diff sha256 ${j.diff_sha256}; audit seq ${j.audit?.promoted}\n`);
      }
      if (out.status === 'force_rolled_back' && out.rolledBack.some((r) => !r.outcome.ok)) process.exitCode = 2;
    });

  program
    .command('confirm')
    .description('as an operator, read the exact diff of a REQUIRE_CONFIRMATION run, then sign it so it can be promoted (asks y/N)')
    .argument('<sandbox_id>', 'the run to confirm')
    .requiredOption('--operator <name>', 'the confirming operator (listed in the policy)')
    .option('--key-dir <dir>', 'where the operator\'s private key is (default: $AIRLOCK_KEYS or ~/.config/airlock/keys)')
    .option('--yes', 'sign without asking (for scripts)')
    .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
    .option('--json', 'machine-readable outcome (the diff and the question go to stderr)')
    .action(async (sandboxId: string, opts: Common & { operator: string; keyDir?: string; yes?: boolean }) => {
      const [{ confirm }, { readRun }, { changesOf, formatShow }, { diffHash }] = await Promise.all([import('../../commit/confirm.js'), import('../../host/runs.js'), import('../show.js'), import('../../commit/load.js')]);
      const w = await ws(opts);
      // Show what would be signed, then ask; a run that cannot be confirmed is refused without asking.
      const shown = readRun(w, sandboxId);
      let expectDiffSha256: string | undefined;
      if (shown.ok && shown.run.result.verdict.recommended_action === 'REQUIRE_CONFIRMATION') {
        const say = (t: string) => (opts.json ? process.stderr : process.stdout).write(t);
        say(formatShow(shown.run, changesOf(w, shown.run)));
        expectDiffSha256 = diffHash(shown.run.result);
        const answer = opts.yes ? 'yes' : await askYesNo(`Confirm this diff and sign it as ${opts.operator}?`, opts.json ? process.stderr : process.stdout);
        if (answer === 'no-terminal') {
          process.stderr.write('airlock confirm: not confirmed: no terminal to ask on; read the diff above (or `airlock show`), then pass --yes to confirm from a script\n');
          process.exitCode = 2;
          return;
        }
        if (answer === 'no') {
          say('not confirmed: nothing signed\n');
          process.exitCode = 2;
          return;
        }
      }
      const out = confirm(w, sandboxId, { operator: opts.operator, keyDir: opts.keyDir, ...(expectDiffSha256 ? { expectDiffSha256 } : {}) });
      if (!out.ok) return void (process.exitCode = refuse('confirm', out.problems, opts.json));
      if (opts.json) process.stdout.write(JSON.stringify({ ok: true, file: out.file, confirmation: out.confirmation }, null, 2) + '\n');
      else process.stdout.write(`confirmed ${sandboxId} as ${opts.operator}: ${out.summary.added} added, ${out.summary.modified} modified, ${out.summary.deleted} deleted; diff sha256 ${out.confirmation.diff_sha256}\nnow: airlock promote ${sandboxId}\n`);
    });

  program
    .command('rollback')
    .description('restore exactly the files a promotion touched (from the tombstones) and remove what it added')
    .argument('<sandbox_id>', 'the promoted run')
    .option('--force', 'roll back even over files changed since the promotion (their newer version is kept in the tombstones)')
    .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
    .option('--json', 'machine-readable outcome')
    .action(async (sandboxId: string, opts: Common & { force?: boolean }) => {
      const { rollback } = await import('../../commit/rollback.js');
      const out = await rollback(await ws(opts), sandboxId, { force: opts.force === true, actor: process.env.USER ?? 'operator' });
      if (!out.ok) return void (process.exitCode = refuse('rollback', out.problems, opts.json));
      const kept = out.journal.forced ?? [];
      const notRestored = out.report.notRestored;
      const left = out.report.unexpected.filter((u) => u.left).map((u) => u.path);
      const restored = out.journal.ops.length - left.length - out.report.keptDirs.length;
      if (opts.json) process.stdout.write(JSON.stringify({ ok: true, sandbox_id: sandboxId, restored, newer_versions_kept: kept, changed_meanwhile_left: left, not_restored: notRestored, audit_seq: out.journal.audit?.rolled_back }, null, 2) + '\n');
      else {
        process.stdout.write(`rolled back ${sandboxId}: ${restored} path(s) restored; audit seq ${out.journal.audit?.rolled_back}\n`);
        for (const p of left) process.stdout.write(`  left as it is (changed while the rollback ran; --force overwrites it): ${safe(p)}\n`);
        for (const k of kept) process.stdout.write(`  ${k.type === 'dir_kept' ? 'kept directory (not empty)' : `newer version kept in tombstones${k.sha256 ? ` (sha256 ${k.sha256})` : ''}`}: ${safe(k.path)}\n`);
        for (const n of notRestored) process.stdout.write(`  restored without what its owner cannot write: ${safe(n.path)}: ${safe(n.what)}\n`);
      }
    });

  program
    .command('recover')
    .description('bring every interrupted promotion or rollback to the old or the new state (and say which); honour FORCE_ROLLBACK verdicts')
    .option('--prune-tombstones', 'also remove tombstones older than the policy\'s retention.tombstones_days (audited; live promotions keep theirs)')
    .option('--abandon <sandbox_id>', 'end this interrupted promotion or rollback even where it cannot be finished (a folder its owner replaced): what can be done is, the rest is left as it is and listed (audited)')
    .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
    .option('--json', 'machine-readable report')
    .action(async (opts: Common & { pruneTombstones?: boolean; abandon?: string }) => {
      const { recover } = await import('../../commit/recover.js');
      const w = await ws(opts);
      const rep = await recover(w, opts.abandon === undefined ? {} : { abandon: opts.abandon, actor: process.env.USER ?? 'operator' });
      if (!('recovered' in rep)) return void (process.exitCode = refuse('recover', rep.problems, opts.json));
      let pruned: unknown;
      if (opts.pruneTombstones) {
        const [{ loadPolicy }, { pruneTombstones }] = await Promise.all([import('../../commit/load.js'), import('../../commit/tombstones.js')]);
        const pol = loadPolicy(w);
        if (!pol.ok) return void (process.exitCode = refuse('recover', pol.problems, opts.json));
        const p = await pruneTombstones(w, pol.policy.retention.tombstones_days);
        if ('ok' in p) return void (process.exitCode = refuse('recover', p.problems, opts.json));
        pruned = p;
      }
      const failed = rep.recovered.filter((r) => r.outcome === 'failed');
      if (opts.json) process.stdout.write(JSON.stringify({ ok: failed.length === 0, ...rep, ...(pruned ? { tombstones: pruned } : {}) }, null, 2) + '\n');
      else {
        if (rep.recovered.length === 0) process.stdout.write('nothing was interrupted: every promotion and rollback is complete\n');
        for (const r of rep.recovered) {
          const state = r.outcome === 'new_state' ? 'NEW state (the promotion is applied)' : r.outcome === 'old_state' ? 'OLD state (as before the promotion)' : r.outcome === 'nothing_applied' ? 'OLD state (nothing had been applied)' : 'FAILED';
          const left = r.abandoned?.leftUndone ?? [];
          process.stdout.write(`${r.sandboxId}: interrupted ${r.interrupted} -> ${state}${r.abandoned ? `, ABANDONED by ${safe(r.abandoned.actor)}: ${left.length} path(s) left as they are` : ''}\n`);
          for (const l of left) process.stdout.write(`  left undone: ${safe(l.path)}: ${l.code}: ${safe(l.message)}\n`);
          for (const n of r.notRestored ?? []) process.stdout.write(`  restored without what its owner cannot write: ${safe(n.path)}: ${safe(n.what)}\n`);
          for (const u of r.unexpected) process.stdout.write(`  unexpected content at ${safe(u.path)}${u.kept ? ` kept in tombstones (sha256 ${u.kept})` : ''}\n`);
          for (const p of r.problems) process.stdout.write(`  ${p.code}: ${safe(p.message)}\n`);
        }
        for (const f of rep.forced) process.stdout.write(`FORCE_ROLLBACK of ${f.verdictSandboxId}: ${f.sandboxId} ${f.ok ? 'rolled back' : `not rolled back: ${f.problems.map((p) => p.code).join(', ')}`}\n`);
        if (pruned) {
          const p = pruned as { removed: unknown[]; keptForRollback: number; retentionDays: number };
          process.stdout.write(`tombstones: ${p.removed.length} older than ${p.retentionDays} days removed, ${p.keptForRollback} kept for live promotions\n`);
        }
      }
      process.exitCode = failed.length > 0 ? 3 : 0;
    });

  program
    .command('history')
    .description('the story of an action from the audit log: runs, confirmations, promotions, rollbacks, recoveries')
    .argument('<action_id>', 'the action id (a descriptor\'s action_id)')
    .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
    .option('--json', 'machine-readable')
    .action(async (actionId: string, opts: Common) => {
      const [{ workspaceRoot, workspacePaths, refuseUnsafe }, { history }] = await Promise.all([import('../../workspace/workspace.js'), import('../../commit/history.js')]);
      if (!existsSync(workspaceRoot(opts.workspace))) {
        process.stderr.write(`airlock: no workspace at ${workspaceRoot(opts.workspace)}; pass --workspace DIR\n`);
        process.exitCode = 2;
        return;
      }
      refuseUnsafe(workspaceRoot(opts.workspace));
      const lines = history(workspacePaths(opts.workspace), actionId);
      if (opts.json) process.stdout.write(JSON.stringify({ action_id: actionId, events: lines }, null, 2) + '\n');
      // An id the audit log never saw is bad input (a typo, another workspace), not an empty story.
      if (lines.length === 0) {
        process.stderr.write(`airlock history: no audit records for action ${safe(actionId)} in ${workspaceRoot(opts.workspace)} (\`airlock runs\` lists recent runs; \`airlock show SANDBOX_ID\` names a run's action)\n`);
        process.exitCode = 2;
      } else if (!opts.json) for (const l of lines) process.stdout.write(`${l.ts}  #${l.seq}  ${l.sandbox_id ?? '-'}  ${safe(l.actor ?? '-')}: ${safe(l.text)}\n`);
    });
}
