import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Problem } from '../base/problem.js';
import { validateSandboxResultAgainst, type DiffEntry, type SandboxResult } from '../contracts/sandbox-result.js';
import type { Action } from '../action/action.js';
import { declarationOf } from '../action/declaration.js';
import type { Judgement, Verdict } from '../judge/judge.js';
import { renderSandboxResult } from '../report/sandbox-result.js';
import { readScopes } from '../commit/load.js';
import { newSandboxId, runAction, sumTimings, writeScopeRecords, type RunContext, type RunOutcome } from './run.js';

/**
 * MULTI_STEP_COMPOSITE (action-descriptor.md, "Composite actions"): each child runs once in its own
 * sandbox and is judged on its own (its own run folder and Sandbox Result, marked as a composite
 * child so it cannot be promoted alone). The composite's own Sandbox Result merges them: the union
 * of the diffs, totals of the resources, the worst verdict; any child's BLOCK blocks the whole,
 * and promotion and rollback of the composite's sandbox id cover every child as one unit.
 *
 * Children run against the same real pre-state (the runner has no stacked overlays), so two
 * children that change the same path cannot be combined: that composite is BLOCKed.
 */

export type CompositeChild = { index: number; action_id: string; sandbox_id: string; verdict: Verdict };
export type CompositeOutcome = RunOutcome & { children?: CompositeChild[] };

const SEVERITY: Record<Verdict, number> = { PROMOTE: 0, REQUIRE_CONFIRMATION: 1, BLOCK: 2, FORCE_ROLLBACK: 3 };

type Ran = Extract<RunOutcome, { kind: 'ran' }>;

const runStep = (a: Action, ctx: RunContext): Promise<CompositeOutcome> => (a.run.kind === 'steps' ? runComposite(a, ctx) : runAction(a, ctx));

export async function runComposite(d: Action, ctx: RunContext): Promise<CompositeOutcome> {
  const sandboxId = newSandboxId();
  const ran: Ran[] = [];
  for (const [i, child] of (d.children ?? []).entries()) {
    const out = await runStep(child, ctx);
    if (out.kind === 'rejected') {
      // A step that cannot run blocks the whole: nothing of the composite is promotable.
      return { kind: 'rejected', problems: out.problems.map((p) => ({ ...p, message: `children[${i}]: ${p.message}`, path: `children.${i}${p.path ? `.${p.path}` : ''}` })) };
    }
    writeFileSync(join(out.runDir, 'composite-child.json'), JSON.stringify({ parent_sandbox_id: sandboxId, parent_action_id: d.id, index: i }) + '\n');
    ran.push(out);
  }
  const runDir = join(ctx.workspace.runs, sandboxId);
  mkdirSync(runDir, { recursive: true, mode: 0o700 });
  // The composite acts in every scope a child acted in (one record per scope root).
  const records = new Map(ran.flatMap((r) => readScopes(r.runDir) ?? []).map((rec) => [rec.path, rec]));
  await writeScopeRecords(runDir, [...records.values()]);
  const sr = mergeResults(d, sandboxId, ran);
  const cross = validateSandboxResultAgainst(sr, declarationOf(d));
  if (cross.length > 0 && sr.verdict.recommended_action !== 'BLOCK') {
    sr.verdict = { recommended_action: 'BLOCK', reasons: [...sr.verdict.reasons, ...cross.map((p) => `${p.code}: ${p.message}`)].slice(0, 64) };
  }
  const { text: rendered, self } = renderSandboxResult(sr);
  const sandboxResultFile = join(runDir, 'sandbox-result.json');
  writeFileSync(sandboxResultFile, rendered);
  const children: CompositeChild[] = ran.map((r, index) => ({ index, action_id: r.sandboxResult.action_id, sandbox_id: r.sandboxId, verdict: r.sandboxResult.verdict.recommended_action }));
  writeFileSync(join(runDir, 'composite.json'), JSON.stringify({ action_id: d.id, children }, null, 2) + '\n');
  const judgement: Judgement = {
    compliance: { ...sr.compliance },
    verdict: sr.verdict.recommended_action,
    reasons: sr.verdict.reasons,
    unexpected: ran.flatMap((r) => r.judgement.unexpected),
  };
  const last = ran[ran.length - 1] as Ran; // the schema requires at least one child
  // `observation` is the last child's raw observation; every child's is with its own run.
  // Each child's output was screened on its own; the composite carries them all, named by child.
  const within = (i: number, ps: Problem[]) => ps.map((p) => ({ ...p, path: `children[${i}].${p.path ?? ''}` }));
  const screening = { problems: ran.flatMap((r, i) => within(i, r.screening.problems)), warnings: ran.flatMap((r, i) => within(i, r.screening.warnings)) };
  return { kind: 'ran', sandboxId, runDir, sandboxResult: sr, sandboxResultFile, judgement, observation: last.observation, argv: last.argv, screening, selfCheckProblems: self.ok ? [] : self.problems, children, timings: sumTimings(ran.map((r) => r.timings)) };
}

const sum = (xs: (number | null)[]): number | null => (xs.some((x) => x === null) ? null : (xs as number[]).reduce((a, b) => a + b, 0));
const concat = <T>(xs: (T[] | null)[]): T[] | null => (xs.some((x) => x === null) ? null : (xs as T[][]).flat());

/** The composite's Sandbox Result: one document over all its children (see the module comment). */
export function mergeResults(d: Action, sandboxId: string, ran: Ran[]): SandboxResult {
  const rs = ran.map((r) => r.sandboxResult);
  const first = rs[0] as SandboxResult;
  const unmeasured: Record<string, string> = {};
  const reasonFor = (field: string, pick: (r: SandboxResult) => unknown) => {
    const i = rs.findIndex((r) => pick(r) === null);
    if (i >= 0) unmeasured[field] = `not measured in children[${i}] (${rs[i]?.sandbox_id}): ${rs[i]?.unmeasured[field] ?? 'unmeasured'}`.slice(0, 500);
  };

  // Diff: the union; a path two children changed is a conflict (they never saw each other).
  const reasons: string[] = [];
  const seen = new Map<string, number>();
  const diff: SandboxResult['filesystem_diff'] = { added: [], modified: [], deleted: [] };
  rs.forEach((r, i) => {
    for (const kind of ['added', 'modified', 'deleted'] as const) {
      r.filesystem_diff[kind].forEach((e: DiffEntry, k) => {
        const prior = seen.get(e.path);
        if (prior !== undefined) {
          reasons.push(`children[${prior}] and children[${i}] both change ${e.path}: steps run on the same pre-state and cannot be combined`);
          return;
        }
        seen.set(e.path, i);
        const at = diff[kind].push(e) - 1;
        for (const h of ['sha256_before', 'sha256_after'] as const) if (e[h] === null) unmeasured[`filesystem_diff.${kind}[${at}].${h}`] = r.unmeasured[`filesystem_diff.${kind}[${k}].${h}`] ?? 'the file could not be hashed';
      });
    }
  });

  const res = (k: keyof SandboxResult['resources']) => rs.map((r) => r.resources[k]);
  const resources: SandboxResult['resources'] = {
    cpu_user_ms: sum(res('cpu_user_ms')),
    cpu_system_ms: sum(res('cpu_system_ms')),
    peak_memory_bytes: res('peak_memory_bytes').some((x) => x === null) ? null : Math.max(...(res('peak_memory_bytes') as number[])),
    disk_write_bytes: sum(res('disk_write_bytes')),
    network_bytes_in: sum(res('network_bytes_in')),
    network_bytes_out: sum(res('network_bytes_out')),
    wall_time_ms: sum(res('wall_time_ms')),
  };
  for (const k of Object.keys(resources) as (keyof SandboxResult['resources'])[]) if (resources[k] === null) reasonFor(`resources.${k}`, (r) => r.resources[k]);
  const wall = rs.reduce((a, r) => a + r.execution.wall_time_ms, 0);
  if (resources.wall_time_ms !== null) resources.wall_time_ms = wall;

  const se = (k: keyof SandboxResult['side_effects']) => rs.map((r) => r.side_effects[k]);
  const flag = (k: 'network_used' | 'privileged_syscall_attempted' | 'device_access_attempted') => {
    const v = se(k) as (boolean | null)[];
    return v.some((x) => x === null) ? null : v.some(Boolean);
  };
  const side_effects: SandboxResult['side_effects'] = {
    processes_spawned: sum(se('processes_spawned') as (number | null)[]),
    executables: concat(se('executables') as (string[] | null)[]),
    signals_sent: concat(se('signals_sent') as ({ signal: string; count: number }[] | null)[]),
    network_attempts: concat(se('network_attempts') as NonNullable<SandboxResult['side_effects']['network_attempts']>[]),
    privileged_syscalls: concat(se('privileged_syscalls') as NonNullable<SandboxResult['side_effects']['privileged_syscalls']>[]),
    device_access: concat(se('device_access') as NonNullable<SandboxResult['side_effects']['device_access']>[]),
    network_used: flag('network_used'),
    privileged_syscall_attempted: flag('privileged_syscall_attempted'),
    device_access_attempted: flag('device_access_attempted'),
  };
  if (side_effects.executables) side_effects.executables = [...new Set(side_effects.executables)].slice(0, 1000);
  for (const k of Object.keys(side_effects) as (keyof SandboxResult['side_effects'])[]) if (side_effects[k] === null) reasonFor(`side_effects.${k}`, (r) => r.side_effects[k]);

  // Streams: the children's kept bytes in order; the hash is over the children's own stream hashes.
  const stream = (k: 'stdout' | 'stderr'): SandboxResult['outputs']['stdout'] => {
    const parts = rs.map((r) => r.outputs[k]);
    const text = parts.map((p) => p.text).join('');
    const captured = parts.reduce((a, p) => a + p.captured_bytes, 0);
    const total = parts.reduce((a, p) => a + p.total_bytes, 0);
    return { text, total_bytes: total, captured_bytes: captured, truncated: captured < total, sha256: createHash('sha256').update(parts.map((p) => p.sha256).join('\n')).digest('hex') };
  };

  const compliance = { ...first.compliance };
  for (const r of rs) for (const k of Object.keys(compliance) as (keyof typeof compliance)[]) compliance[k] = compliance[k] && r.compliance[k];

  // Verdict: the worst child's, then the composite's own declaration (as the judge does for one action).
  let verdict = 'PROMOTE' as Verdict;
  rs.forEach((r, i) => {
    const v = r.verdict.recommended_action;
    if (SEVERITY[v] > SEVERITY[verdict]) verdict = v;
    if (v !== 'PROMOTE') for (const why of r.verdict.reasons.slice(0, 8)) reasons.push(`children[${i}] (${r.sandbox_id}) ${v}: ${why}`);
  });
  if (verdict === 'FORCE_ROLLBACK') verdict = 'BLOCK';
  if (reasons.some((r) => r.includes('cannot be combined'))) verdict = 'BLOCK';
  if (d.risk === 'CRITICAL') {
    verdict = 'BLOCK';
    reasons.push('risk level CRITICAL is blocked');
  }
  if (verdict === 'PROMOTE' && (d.confirmationRequired || d.risk === 'HIGH')) {
    verdict = 'REQUIRE_CONFIRMATION';
    reasons.push(d.confirmationRequired ? 'the declaration asks for a person to confirm' : 'risk level HIGH needs a person to confirm');
  }
  const failed = rs.find((r) => r.execution.status !== 'SUCCESS');
  const ex = failed?.execution ?? first.execution;
  const last = rs[rs.length - 1] as SandboxResult;
  return {
    schema_version: '1.0',
    action_id: d.id,
    sandbox_id: sandboxId,
    execution: {
      started_at: first.execution.started_at,
      ended_at: last.execution.ended_at,
      wall_time_ms: wall,
      status: ex.status,
      exit_code: ex.exit_code,
      signal: ex.signal,
      termination_reason: `${rs.length} step(s); ${failed ? `first failing step ${failed.sandbox_id}: ${ex.termination_reason}` : 'every step exited with 0'}`.slice(0, 500),
    },
    outputs: { stdout: stream('stdout'), stderr: stream('stderr') },
    filesystem_diff: diff,
    resources,
    side_effects,
    unmeasured,
    compliance,
    verdict: { recommended_action: verdict, reasons: verdict === 'PROMOTE' ? ['every step passed its own judgement; effects match the declaration'] : reasons.slice(0, 64).map((r) => r.slice(0, 500)) },
    audit: { ...first.audit },
  };
}
