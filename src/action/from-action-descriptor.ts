import type { ActionDescriptor } from '../contracts/action-descriptor.js';
import type { Problem } from '../base/problem.js';
import { DEFAULT_LIMITS, type Action, type ActionRun } from './action.js';

const MIB = 1024 * 1024;

/** How each runnable descriptor type is carried out (see docs/action-descriptor.md). */
function runOf(d: ActionDescriptor): ActionRun | Problem {
  const fx = d.effects.filesystem;
  const notBuilt = (what: string): Problem => ({ code: 'RUN_NOT_BUILT', message: `${d.action_type}: ${what}`, path: 'action_type' });
  switch (d.action_type) {
    case 'COMMAND_EXECUTION':
      return { kind: 'argv', argv: d.command ?? [] };
    case 'FILE_DELETE':
      return { kind: 'primitive', op: { op: 'delete', globs: fx.delete } };
    case 'FILE_WRITE':
      if (!d.write?.content_base64) return notBuilt('a write from `source_sha256` is not built yet; give `content_base64`');
      return { kind: 'primitive', op: { op: 'write', path: d.write.path, contentBase64: d.write.content_base64 } };
    case 'FILE_MOVE':
      return d.move ? { kind: 'primitive', op: { op: 'move', from: d.move.from, to: d.move.to } } : notBuilt('no `move` field');
    case 'FILE_READ':
      return { kind: 'primitive', op: { op: 'read', path: d.scope.filesystem.paths[0] ?? '' } };
    case 'DIRECTORY_CREATE':
      return fx.create.length === 1 ? { kind: 'primitive', op: { op: 'mkdir', path: fx.create[0] as string } } : notBuilt('exactly one directory in effects.filesystem.create');
    case 'DIRECTORY_DELETE':
      return fx.delete.length === 1 ? { kind: 'primitive', op: { op: 'rmdir', path: fx.delete[0] as string } } : notBuilt('exactly one directory in effects.filesystem.delete');
    case 'MULTI_STEP_COMPOSITE':
      return { kind: 'steps' };
    default:
      return { code: 'LANE_ACTION_NOT_RUNNABLE', message: `${d.action_type} has no carrier in Airlock yet: nothing was run`, path: 'action_type' };
  }
}

/** A validated Action Descriptor as an Action (a composite with its steps), or the reasons it cannot run. */
export function actionFromDescriptor(d: ActionDescriptor): Action | { problems: Problem[] } {
  const run = runOf(d);
  if ('message' in run) return { problems: [run] };
  let children: Action[] | undefined;
  if (run.kind === 'steps') {
    const steps = (d.children ?? []).map(actionFromDescriptor);
    const problems = steps.flatMap((s, i) => ('problems' in s ? s.problems.map((p) => ({ ...p, message: `children[${i}]: ${p.message}`, path: `children.${i}${p.path ? `.${p.path}` : ''}` })) : []));
    if (problems.length > 0) return { problems };
    children = steps as Action[];
  }
  const r = d.resources;
  const pre = d.preconditions;
  return {
    id: d.action_id,
    source: 'action-descriptor',
    kind: d.action_type,
    lane: 'ns',
    run,
    inputs: [],
    outputsExpected: [],
    scope: { paths: d.scope.filesystem.paths, recursive: d.scope.filesystem.recursive },
    effects: {
      create: d.effects.filesystem.create,
      modify: d.effects.filesystem.modify,
      delete: d.effects.filesystem.delete,
      network: d.effects.network,
      systemStateChange: d.effects.system_state_change,
    },
    limits: {
      wallMs: r.max_duration_ms,
      cpuMs: r.max_cpu_ms,
      memoryBytes: r.max_memory_mb * MIB,
      diskBytes: r.max_disk_mb * MIB,
      files: DEFAULT_LIMITS.files,
      pids: DEFAULT_LIMITS.pids,
      stdoutBytes: DEFAULT_LIMITS.stdoutBytes,
      stderrBytes: DEFAULT_LIMITS.stderrBytes,
    },
    // A descriptor names no destinations: when it declares network use and its sandbox allows it,
    // it may reach what the host policy's allowlist allows (the lane applies that ceiling).
    network: { mode: d.effects.network && d.sandbox.allow_network ? 'allowlist' : 'none', allowlist: [] },
    risk: d.risk_level,
    confirmationRequired: d.confirmation.required,
    rollbackSupported: d.rollback.supported,
    sandboxRequired: d.sandbox.required,
    preconditions: { pathsExist: pre.paths_exist ?? [], networkAvailable: pre.network_available === true, userIdle: pre.user_idle === true },
    cooldownOnRepeat: d.confirmation.cooldown_on_repeat,
    ...(children ? { children } : {}),
    display: d.action_type === 'COMMAND_EXECUTION' ? (d.command ?? []).join(' ') : `${d.action_type} ${d.intent_summary}`,
  };
}
