import { readFileSync, statSync } from 'node:fs';
import type { Problem, Result } from '../base/problem.js';
import { parsePolicy, type Policy } from './policy.js';

export const policyLoadRules = [
  { code: 'POLICY_MISSING', spec: 'Issue 18: every door reads the host policy (WORKSPACE/policy.yaml) through one loader; without it nothing runs (fail closed), on every door.', fix: 'Restore policy.yaml (`airlock init DIR` writes the default one), then try again.' },
  { code: 'POLICY_UNREADABLE', spec: 'The policy file must be readable by the Airlock process.', fix: 'Check the file\'s permissions and the disk.' },
] as const;

/**
 * The host policy of a workspace: the one loader every door and the host core use. A missing or
 * invalid policy is a refusal with coded problems (prefixed with the file), never "no policy".
 * Parsed once per change of the file (its mtime and size), so a long-lived service pays nothing.
 */
let cache: { key: string; value: Result<Policy> } | undefined;

export function loadPolicy(policyFile: string): Result<Policy> {
  let key: string;
  try {
    const st = statSync(policyFile);
    key = `${policyFile}\0${st.mtimeMs}\0${st.size}\0${st.ino}`;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return refuse(code === 'ENOENT' ? { code: 'POLICY_MISSING', message: `${policyFile} does not exist: nothing runs without the host policy (\`airlock init\` writes the default one)` } : { code: 'POLICY_UNREADABLE', message: `${policyFile}: cannot read it (${code})` });
  }
  if (cache?.key === key) return cache.value;
  let text: string;
  try {
    text = readFileSync(policyFile, 'utf8');
  } catch (e) {
    return refuse({ code: 'POLICY_UNREADABLE', message: `${policyFile}: cannot read it (${(e as NodeJS.ErrnoException).code})` });
  }
  const parsed = parsePolicy(text);
  const value: Result<Policy> = parsed.ok ? parsed : { ok: false, problems: parsed.problems.map((p) => ({ ...p, message: `${policyFile}: ${p.message}` })) };
  cache = { key, value };
  return value;
}

const refuse = (p: Problem): Result<Policy> => ({ ok: false, problems: [p] });
