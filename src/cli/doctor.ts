import { doctor } from '../sandbox/doctor.js';
import { tmpdir } from 'node:os';
import { untraversable } from '../sandbox/ns/staging.js';
import { tracerBinaryPath } from '../sandbox/observe/tracer.js';

/** `airlock doctor`: what this host can enforce, and which limits will only be reported. Exit 1 when the ns lane cannot run. */
export async function doctorCommand(opts: { json?: boolean }): Promise<number> {
  const c = await doctor(true);
  if (opts.json) {
    process.stdout.write(JSON.stringify(c, null, 2) + '\n');
    return c.blockers.length > 0 ? 1 : 0;
  }
  const yes = (b: boolean) => (b ? 'yes' : 'NO');
  // Runs stage below TMPDIR, and bwrap (as the sandbox's host user) must reach it.
  const staging = c.isRoot && c.sandboxHostUser ? untraversable(tmpdir(), c.sandboxHostUser) : null;
  const tracer = tracerBinaryPath();
  const tracerLine =
    process.env.AIRLOCK_SYSCALL_TRACER === 'strace' ? 'off (AIRLOCK_SYSCALL_TRACER=strace): strace observes'
    : !tracer ? 'NOT BUILT (no C compiler when Airlock was built: apt-get install gcc libc6-dev, then npm run build): strace observes'
    : !c.isRoot ? `${tracer} present but unused (needs root): strace observes`
    : `${tracer} (ptrace, attached per run; side effects observed)`;
  const lines = [
    `platform         ${c.platform} (kernel ${c.kernel}), running as ${c.isRoot ? 'root' : 'non-root'}`,
    `user namespaces  ${yes(c.userNamespaces.available)} (${c.userNamespaces.detail})`,
    `bubblewrap       ${c.bwrap ? `${c.bwrap.version} at ${c.bwrap.path}; --disable-userns ${yes(c.bwrap.supports.disableUserns)}, --overlay ${yes(c.bwrap.supports.overlay)}, --size ${yes(c.bwrap.supports.size)}` : 'NOT FOUND (apt-get install bubblewrap)'}`,
    `sandbox uid      ${c.sandboxHostUser ? `host ${c.sandboxHostUser.name} (${c.sandboxHostUser.uid}); uid 65534 inside` : 'the caller\'s own uid (not root)'}`,
    `cgroups          ${c.cgroup.version ? `v${c.cgroup.version}` : 'none usable'}; controllers: ${c.cgroup.controllers.join(', ') || 'none'}`,
    `seccomp          ${yes(c.seccomp.available)} (${c.seccomp.detail})`,
    `overlayfs        ${yes(c.overlayfs)} (declared scopes are seen through a copy-on-write overlay)`,
    `syscall tracer   ${tracerLine}`,
    `strace           ${c.strace ? `${c.strace.version} at ${c.strace.path} (the fallback tracer)` : 'NOT FOUND: without the syscall tracer, side effects will be null (unmeasured) and every run BLOCKed'}`,
    `tmpfs caps       /out ${yes(c.tmpfsSizeCaps.hostOut)}, /tmp ${yes(c.tmpfsSizeCaps.sandboxTmp)} (${c.tmpfsSizeCaps.detail})`,
    `interpreters     ${c.interpreters.map((i) => `${i.name} ${i.version}`).join(', ') || 'none'}`,
    `staging folder   ${staging ? `NOT USABLE: ${staging}` : `${tmpdir()} (TMPDIR): the sandbox's host user can reach it`}`,
    'limits:',
    ...c.limits.map((l) => `  ${l.limit.padEnd(12)} ${l.enforced ? 'enforced' : 'REPORTED ONLY'}: ${l.how}`),
  ];
  const blockers = staging ? [...c.blockers, 'the staging folder (TMPDIR) is not reachable by the sandbox\'s host user: see "staging folder" above'] : c.blockers;
  if (blockers.length > 0) lines.push('the ns lane cannot run here:', ...blockers.map((b) => `  - ${b}`));
  else lines.push('the ns lane can run here.');
  process.stdout.write(lines.join('\n') + '\n');
  return blockers.length > 0 ? 1 : 0;
}
