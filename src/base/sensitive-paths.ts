// Paths where a written file acts later, outside any sandbox: credentials, shell start-up files,
// autostart entries, and a repository's hooks and config (git runs them on the host). The Action
// Descriptor contract refuses to declare the first three; the judge asks a person about any change
// to any of them, however it was declared (`airlock exec --rw DIR` declares everything under DIR).
import { pathSegments } from './globs.js';

export const CREDENTIAL_SEGMENTS = ['.ssh', '.gnupg', '.aws', '.kube', '.docker', '.netrc', '.git-credentials'] as const;
const PERSISTENCE_FILES = new Set(['.bashrc', '.bash_profile', '.bash_login', '.profile', '.zshrc', '.zprofile', '.zshenv', '.zlogin', '.login', '.cshrc', '.tcshrc', '.xinitrc', '.xprofile', '.xsessionrc', '.pam_environment']);
const PERSISTENCE_DIRS = [['.config', 'autostart'], ['.config', 'systemd'], ['.local', 'share', 'systemd'], ['Library', 'LaunchAgents'], ['Library', 'LaunchDaemons']];
/** git executes what these hold (hooks; core.hooksPath, core.fsmonitor, aliases in config). */
const REPOSITORY_CODE = [['.git', 'hooks'], ['.git', 'config']];

const startsAt = (segs: readonly string[], run: readonly string[]): boolean => segs.some((_, i) => run.every((d, k) => segs[i + k] === d));

export function isPersistencePath(path: string): boolean {
  const segs = pathSegments(path);
  if (PERSISTENCE_FILES.has(segs[segs.length - 1] ?? '')) return true;
  return PERSISTENCE_DIRS.some((dir) => startsAt(segs, dir));
}

/** Why a change at `path` acts outside the sandbox later, or null. */
export function sensitivePath(path: string): string | null {
  const segs = pathSegments(path);
  const cred = segs.find((s) => (CREDENTIAL_SEGMENTS as readonly string[]).includes(s));
  if (cred) return `it is in the credential folder ${cred}`;
  if (isPersistencePath(path)) return 'it is a shell start-up file or an autostart entry (it runs at the next login)';
  if (REPOSITORY_CODE.some((run) => startsAt(segs, run))) return "it is a git repository's hook or config (git runs what they name on the host)";
  return null;
}
