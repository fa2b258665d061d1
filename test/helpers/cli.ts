import { spawnSync } from 'node:child_process';
import { repoPath } from './paths.js';

/** Runs the real `airlock` command (the bundled CLI, as a user would). */
export function airlock(args: string[], opts: { env?: NodeJS.ProcessEnv; input?: string } = {}) {
  const r = spawnSync(repoPath('bin/airlock'), args, { encoding: 'utf8', env: { ...process.env, ...opts.env }, input: opts.input, timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
