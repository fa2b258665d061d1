import type { Problem } from '../base/problem.js';
import type { Action } from '../action/action.js';
import { uncoveredEntries } from '../base/allowlist.js';
import type { Policy } from './policy.js';

export const policyDecisionRules = [
  { code: 'POLICY_LIMIT', spec: 'A request that asks for more than the host policy allows is rejected with the rule that stopped it; nothing silently clamps.', fix: 'Ask for less (the message gives the host maximum), or have the operator raise the limit in policy.yaml.' },
  { code: 'POLICY_LANGUAGE', spec: 'The policy lists the languages that may run.', fix: 'Use an allowed language, or add it to `languages` in policy.yaml.' },
  { code: 'POLICY_LANE', spec: 'The policy lists the lanes that may run (ns, monty).', fix: 'Use an allowed backend, or add the lane to `lanes` in policy.yaml.' },
  { code: 'POLICY_NETWORK', spec: 'The policy sets the network ceiling; a request cannot widen it.', fix: 'Ask for no network, or only destinations in the policy\'s allowlist.' },
  { code: 'POLICY_RISK_BLOCKED', spec: 'Risk rules: the policy blocks this risk level (CRITICAL by default).', fix: 'Split the work into lower-risk requests, or have the operator change `risk` in policy.yaml.' },
] as const;

export interface PolicyDecision {
  problems: Problem[];
  /** The policy asks a person to confirm the result before it is handed on or promoted. */
  confirmationRequired: boolean;
}

const MIB = 1024 * 1024;

/** Checks an Action against the host policy. `language` is the TR's language, when there is one. */
export function evaluatePolicy(policy: Policy, action: Action, language?: string): PolicyDecision {
  const problems: Problem[] = [];
  const over = (rule: string, asked: string, max: string) =>
    problems.push({ code: 'POLICY_LIMIT', message: `asks for ${asked}; the host policy allows at most ${max} (rule limits.${rule})`, path: `limits.${rule}` });
  const l = action.limits;
  const L = policy.limits;
  const cores = l.cpuMs / l.wallMs;
  if (cores > L.cpu_cores + 1e-9) over('cpu_cores', `${cores} cores`, `${L.cpu_cores}`);
  if (l.memoryBytes > L.memory_mb * MIB) over('memory_mb', `${l.memoryBytes / MIB} MiB`, `${L.memory_mb} MiB`);
  if (l.wallMs > L.time_sec * 1000) over('time_sec', `${l.wallMs / 1000} s`, `${L.time_sec} s`);
  if (l.pids > L.pids) over('pids', `${l.pids} processes`, `${L.pids}`);
  if (l.diskBytes > L.out_mb * MIB) over('out_mb', `${l.diskBytes / MIB} MiB of output`, `${L.out_mb} MiB`);
  if (l.files > L.files) over('files', `${l.files} files`, `${L.files}`);
  if (Math.max(l.stdoutBytes, l.stderrBytes) > L.stdout_kb * 1024) over('stdout_kb', `${Math.max(l.stdoutBytes, l.stderrBytes) / 1024} KiB of stdout`, `${L.stdout_kb} KiB`);
  if (language && !(policy.languages as string[]).includes(language)) {
    problems.push({ code: 'POLICY_LANGUAGE', message: `language ${language} is not allowed on this host (rule languages: ${policy.languages.join(', ') || 'none'})`, path: 'languages' });
  }
  if (!policy.lanes.includes(action.lane)) {
    problems.push({ code: 'POLICY_LANE', message: `lane ${action.lane} is not allowed on this host (rule lanes: ${policy.lanes.join(', ')})`, path: 'lanes' });
  }
  const wantsNetwork = action.network.mode === 'allowlist' || action.effects.network;
  if (wantsNetwork && !policy.network.allow) {
    problems.push({ code: 'POLICY_NETWORK', message: 'asks for network access; the host policy allows none (rule network.allow: false)', path: 'network.allow' });
  } else if (wantsNetwork) {
    // Entry semantics (wildcards, ports, address ranges) are the proxy's own: src/network/allowlist.ts.
    const outside = uncoveredEntries(action.network.allowlist, policy.network.allowlist);
    if (outside.length > 0) problems.push({ code: 'POLICY_NETWORK', message: `destinations outside the host's allowlist: ${outside.join(', ')} (rule network.allowlist)`, path: 'network.allowlist' });
  }
  const rule = policy.risk[action.risk.toLowerCase() as keyof Policy['risk']];
  if (rule === 'block') problems.push({ code: 'POLICY_RISK_BLOCKED', message: `risk level ${action.risk} is blocked on this host (rule risk.${action.risk.toLowerCase()}: block)`, path: `risk.${action.risk.toLowerCase()}` });
  return { problems, confirmationRequired: rule === 'require_confirmation' };
}
