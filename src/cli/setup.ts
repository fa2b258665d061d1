// `airlock setup --delegate USER` / `--undelegate USER` (root, once per user): the cgroup subtree that
// lets an ordinary user's runs have their limits enforced (src/sandbox/cgroup/setup.ts).
import { delegate, lookupUser, undelegate } from '../sandbox/cgroup/setup.js';

export interface SetupOptions {
  delegate?: string;
  undelegate?: string;
  json?: boolean;
}

const isProblem = (x: object): x is { code: string; message: string } => 'code' in x && 'message' in x;

export async function setupCommand(opts: SetupOptions): Promise<number> {
  const out = (o: unknown, text: string): void => void process.stdout.write(opts.json ? JSON.stringify(o, null, 2) + '\n' : text);
  const fail = (p: { code: string; message: string }): number => {
    if (opts.json) process.stdout.write(JSON.stringify({ ok: false, problems: [p] }, null, 2) + '\n');
    else process.stderr.write(`airlock setup: ${p.code}: ${p.message}\n`);
    return p.code === 'SETUP_DELEGATE_FAILED' ? 3 : 2;
  };
  if (!opts.delegate === !opts.undelegate) return fail({ code: 'SETUP_USAGE', message: 'give exactly one of --delegate USER or --undelegate USER' });
  if (opts.delegate) {
    const user = lookupUser(opts.delegate);
    if (isProblem(user)) return fail(user);
    const r = delegate(user);
    if (isProblem(r)) return fail(r);
    out(
      { ok: true, user: user.name, cgroupVersion: r.version, dirs: r.dirs, notes: r.notes },
      [`delegated to ${user.name} (uid ${user.uid}), cgroup v${r.version}:`, ...r.dirs.map((d) => `  ${d}`), ...r.notes.map((n) => `note: ${n}`), `${user.name} can check with: airlock doctor`, ''].join('\n'),
    );
    return 0;
  }
  const r = await undelegate(opts.undelegate!);
  if (isProblem(r)) return fail(r);
  out({ ok: r.errors.length === 0, removed: r.removed, errors: r.errors }, [...r.removed.map((d) => `removed ${d}`), ...r.errors.map((e) => `NOT removed: ${e}`), r.removed.length + r.errors.length === 0 ? `nothing was delegated to ${opts.undelegate}` : '', ''].filter((l, i, a) => l !== '' || i === a.length - 1).join('\n'));
  return r.errors.length ? 3 : 0;
}
