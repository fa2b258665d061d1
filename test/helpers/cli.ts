import { spawnSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { repoPath } from './paths.js';

/** Runs the real `airlock` command (the bundled CLI, as a user would). */
export function airlock(args: string[], opts: { env?: NodeJS.ProcessEnv; input?: string } = {}) {
  const r = spawnSync(repoPath('bin/airlock'), args, { encoding: 'utf8', env: { ...process.env, ...opts.env }, input: opts.input, timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Runs `airlock` as the host's `nobody` (needs root), from a home folder of its own, with a bare environment. */
export function airlockAsNobody(args: string[], env: string[] = []) {
  const home = mkdtempSync(join(tmpdir(), 'airlock-nobody-'));
  chownSync(home, 65534, 65534);
  try {
    const path = [dirname(process.execPath), '/usr/bin', '/bin'].join(':');
    const r = spawnSync('runuser', ['-u', 'nobody', '--', 'env', '-i', `PATH=${path}`, `HOME=${home}`, `TMPDIR=${home}`, ...env, repoPath('bin/airlock'), ...args], { encoding: 'utf8', cwd: home, timeout: 120_000 });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}
