import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Problem } from '../../base/problem.js';
import { scopeHostPath, type Action } from '../../action/action.js';
import { doctor } from '../doctor.js';
import { runNs } from '../ns/runner.js';
import type { Observation, NsRunSpec, RunEvent } from '../types.js';
import { primitiveArgv } from './primitives.js';
import { networkGrant } from '../../base/allowlist.js';
import { DEFAULT_NETWORK_CAPS, type NetworkCaps } from '../egress/records.js';
import type { Resolver } from '../egress/resolver.js';
import { ownedTempDir } from '../../base/owner.js';

export type LaneOutcome = { ok: true; observation: Observation; argv: string[] } | { ok: false; problems: Problem[] };

export const nsLaneRules = [
  {
    code: 'LANE_RUNTIME_MISSING',
    spec: 'Issue 3: a language whose runtime the host lacks is a clear error (nothing runs).',
    fix: 'Install the interpreter on the host (see `airlock doctor`), or use a language the host has.',
  },
  {
    code: 'LANE_ACTION_NOT_RUNNABLE',
    spec: 'Airlock runs COMMAND_EXECUTION and the FILE_*/DIRECTORY_* types; other action types have no carrier yet.',
    fix: 'Express the action as a COMMAND_EXECUTION with an argv, or as a file primitive.',
  },
  {
    code: 'LANE_NETWORK_NO_CEILING',
    spec: 'Issue 7: the policy file sets the network ceiling; a run that asks for the network needs it.',
    fix: 'Run the request through the gate (which reads policy.yaml), or pass the policy\'s network section to the lane.',
  },
  {
    code: 'LANE_NETWORK_EMPTY',
    spec: 'Issue 7: a request cannot widen the ceiling: the run may reach the intersection of its allowlist and the policy\'s.',
    fix: 'Ask only for destinations the policy\'s network.allowlist covers (host and port), or have the operator add them.',
  },
  {
    code: 'NET_ALLOW_ENTRY',
    spec: 'Issue 7: allowlist entries are host[:port], *.host[:port], an IP or range [:port], or an http(s) URL.',
    fix: 'Rewrite the entry (docs/network.md gives the grammar); a bare * or *.tld is never an allowlist.',
  },
] as const;

/** The host's side of a run that asks for the network (from policy.yaml). */
export interface LaneNetworkContext {
  /** policy.network: the ceiling. */
  ceiling: { allow: boolean; allowlist: readonly string[] };
  /** Per-run caps (default DEFAULT_NETWORK_CAPS). */
  caps?: NetworkCaps;
  /** Tests and benchmarks only: how the proxy resolves names. */
  resolve?: Resolver;
}

/** Interpreter words a TR may use, and how the ns lane runs them (see docs/tool-request.md). */
function interpreterArgv(argv: string[], nodeMajor: number): { argv: string[] } | { problem: Problem } {
  const [first, ...rest] = argv;
  if (first === 'node' && /\.(ts|mts|cts)$/.test(rest.find((a) => !a.startsWith('-')) ?? '')) {
    // Node runs TypeScript only from 22.6 (type stripping); older hosts lack the runtime.
    if (nodeMajor < 22) return { problem: { code: 'LANE_RUNTIME_MISSING', message: `language ts needs Node >= 22.6 on the host; this host has Node ${process.versions.node}` } };
    return { argv: ['node', '--experimental-strip-types', ...rest] };
  }
  return { argv };
}

/** Refusals of the runner before anything ran: the request is rejected (nothing to judge). */
const NOTHING_RAN = new Set(['NS_INPUT_HASH_MISMATCH', 'NS_SCOPE_UNSAFE', 'NS_SCOPE_UNREADABLE', 'NS_SCOPE_AGENT_MISSING']);

/**
 * Runs an Action in the ns lane. `inputsDir` holds the action's inputs by name, already hash-checked
 * by the caller; `outDir` receives /out.
 */
export async function runInNsLane(action: Action, ctx: { inputsDir: string; outDir: string; outDirParent?: Promise<unknown>; blobDir?: string; tombstoneDir?: string; signal?: AbortSignal; network?: LaneNetworkContext; onEvent?: (e: RunEvent) => void }): Promise<LaneOutcome> {
  // Network: only what the request asks for AND the policy allows; nothing when either says none.
  let network: NsRunSpec['network'];
  if (action.network.mode === 'allowlist') {
    if (!ctx.network) return { ok: false, problems: [{ code: 'LANE_NETWORK_NO_CEILING', message: `${action.id} asks for the network but no host policy ceiling was given to this run: nothing ran` }] };
    // A descriptor's network declaration has no list of its own: it asks for the ceiling itself.
    const asked = action.source === 'action-descriptor' && action.network.allowlist.length === 0 ? ctx.network.ceiling.allowlist : action.network.allowlist;
    const { grant, problems } = networkGrant(asked, ctx.network.ceiling);
    if (problems.length > 0) return { ok: false, problems };
    if (grant.rules.length === 0) {
      return { ok: false, problems: [{ code: 'LANE_NETWORK_EMPTY', message: `nothing of ${action.id}'s network allowlist (${action.network.allowlist.join(', ').slice(0, 300)}) is within the policy's ceiling${ctx.network.ceiling.allow ? '' : ' (network.allow: false)'}: nothing ran` }] };
    }
    network = { grant, caps: ctx.network.caps ?? DEFAULT_NETWORK_CAPS, ...(ctx.network.resolve ? { resolve: ctx.network.resolve } : {}) };
  }
  let argv: string[];
  let staged: string | null = null;
  const inputs: NsRunSpec['inputs'] & object = action.inputs.map((i) => ({ hostPath: join(ctx.inputsDir, i.name), name: i.name, sha256: i.sha256 }));
  if (action.run.kind === 'argv') {
    const r = action.source === 'tool-request' ? interpreterArgv(action.run.argv, Number(process.versions.node.split('.')[0])) : { argv: action.run.argv };
    if ('problem' in r) return { ok: false, problems: [r.problem] };
    argv = r.argv;
  } else if (action.run.kind === 'primitive') {
    const p = primitiveArgv(action.run.op);
    argv = p.argv;
    if (p.stagedContent) {
      staged = ownedTempDir('content');
      writeFileSync(join(staged, 'content'), p.stagedContent, { mode: 0o444 });
      inputs.push({ hostPath: join(staged, 'content'), name: 'content' });
    }
  } else {
    return { ok: false, problems: [{ code: 'LANE_ACTION_NOT_RUNNABLE', message: 'code actions run in the monty lane, not ns' }] };
  }
  const caps = await doctor();
  if (action.source === 'tool-request' && !argv[0]?.startsWith('/')) {
    const known = caps.interpreters.map((i) => i.name as string);
    const wanted = argv[0] === 'python' || argv[0]?.startsWith('python3') ? 'python3' : (argv[0] ?? '');
    if (!known.includes(wanted)) {
      return { ok: false, problems: [{ code: 'LANE_RUNTIME_MISSING', message: `this host has no ${wanted} runtime for ${action.id} (found: ${known.join(', ') || 'none'}); see \`airlock doctor\`` }] };
    }
    if (argv[0] === 'python') argv = ['python3', ...argv.slice(1)];
  }
  const readOnly = new Set((action.scope.readOnly ?? []).map(scopeHostPath));
  const scopes = [...new Set(action.scope.paths.map(scopeHostPath))].map((hostPath) => ({ hostPath, ...(readOnly.has(hostPath) ? { readOnly: true } : {}) }));
  const spec: NsRunSpec = {
    argv,
    cwd: action.cwd ?? (action.source === 'tool-request' ? '/in' : '/tmp'),
    inputs,
    outDir: ctx.outDir,
    ...(ctx.outDirParent ? { outDirParent: ctx.outDirParent } : {}),
    scopes,
    ...(ctx.blobDir ? { keepScopeContent: ctx.blobDir } : {}),
    ...(ctx.tombstoneDir ? { keepScopePreimages: ctx.tombstoneDir } : {}),
    ...(ctx.signal ? { signal: ctx.signal } : {}),
    ...(ctx.onEvent ? { onEvent: ctx.onEvent } : {}),
    ...(network ? { network } : {}),
    limits: {
      wallMs: action.limits.wallMs,
      cpuMs: action.limits.cpuMs,
      memoryBytes: action.limits.memoryBytes,
      pids: action.limits.pids,
      outBytes: action.limits.diskBytes,
      tmpBytes: Math.min(action.limits.diskBytes, 64 * 1024 * 1024),
      files: action.limits.files,
      stdoutBytes: action.limits.stdoutBytes,
      stderrBytes: action.limits.stderrBytes,
    },
  };
  try {
    const observation = await runNs(spec);
    if (observation.problems.some((p) => p.code === 'NS_ARGV_NOT_FOUND')) {
      return { ok: false, problems: observation.problems.map((p) => (p.code === 'NS_ARGV_NOT_FOUND' ? { ...p, code: 'LANE_RUNTIME_MISSING' } : p)) };
    }
    // Nothing ran: a rejection of the request, not a sandbox result.
    if (observation.problems.some((p) => NOTHING_RAN.has(p.code))) return { ok: false, problems: observation.problems };
    return { ok: true, observation, argv };
  } finally {
    if (staged) rmSync(staged, { recursive: true, force: true });
  }
}
