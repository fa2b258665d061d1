// The bare bwrap the benches compare with: a minimal sandbox of an argv, spawned from Node.
import { spawn } from 'node:child_process';

export const bareArgs = (argv) => ['--unshare-all', '--die-with-parent', '--new-session', '--cap-drop', 'ALL', '--ro-bind', '/usr', '/usr', '--symlink', 'usr/lib', '/lib', '--symlink', 'usr/lib64', '/lib64', '--symlink', 'usr/bin', '/bin', '--proc', '/proc', '--dev', '/dev', '--', ...argv];

/** One bare bwrap of `argv` (default /bin/true); rejects unless it exits 0. */
export const bareBwrap = (argv = ['/bin/true']) =>
  new Promise((resolve, reject) => {
    const p = spawn('bwrap', bareArgs(argv), { stdio: 'ignore' });
    p.once('error', reject);
    p.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`bwrap exit ${code}`))));
  });
