// The sandbox environment: empty apart from a short allowlist the runner controls, plus caller
// variables that pass SAFE_ENV rules. The host's own environment never reaches the sandbox.
import type { Problem } from '../../base/problem.js';

/** Variables the runner always sets (callers cannot override them). */
export const BASE_ENV_NAMES = ['PATH', 'HOME', 'TMPDIR', 'LANG', 'PWD', 'PYTHONDONTWRITEBYTECODE'] as const;

export function baseEnv(path: string[], cwd: string): Record<string, string> {
  // No bytecode caches: the sandbox is thrown away, and a cache written next to /in or an
  // interpreter's library would only be a refused write in the report.
  return { PATH: path.join(':'), HOME: '/tmp', TMPDIR: '/tmp', LANG: 'C.UTF-8', PWD: cwd, PYTHONDONTWRITEBYTECODE: '1' };
}

/** Loader and shell start-up hooks: refused, they change what the program is, not how it is configured. */
const FORBIDDEN = /^(LD_|BASH_ENV$|ENV$|SHELLOPTS$|BASHOPTS$|IFS$|PS4$|NODE_OPTIONS$|PYTHONSTARTUP$|PYTHONHOME$|GCONV_PATH$|LOCPATH$)/;
const NAME = /^[A-Z_][A-Z0-9_]{0,63}$/;

export function checkSpecEnv(env: Record<string, string> | undefined): Problem[] {
  const problems: Problem[] = [];
  for (const [k, v] of Object.entries(env ?? {})) {
    if (!NAME.test(k)) problems.push({ code: 'NS_ENV_NAME', message: `environment variable name "${k.slice(0, 64)}" is not [A-Z_][A-Z0-9_]*: rename it`, path: `env.${k.slice(0, 64)}` });
    else if ((BASE_ENV_NAMES as readonly string[]).includes(k)) problems.push({ code: 'NS_ENV_RESERVED', message: `${k} is set by the sandbox runner and cannot be overridden: remove it`, path: `env.${k}` });
    else if (FORBIDDEN.test(k)) problems.push({ code: 'NS_ENV_FORBIDDEN', message: `${k} changes how programs are loaded or started and is refused: remove it`, path: `env.${k}` });
    else if (typeof v !== 'string' || v.includes('\0') || v.length > 4096) problems.push({ code: 'NS_ENV_VALUE', message: `the value of ${k} must be a string of at most 4096 characters without NUL`, path: `env.${k}` });
  }
  return problems;
}
