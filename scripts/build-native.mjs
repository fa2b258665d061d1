// Builds Airlock's native helpers with the system C compiler:
//   native/tracer.c  -> dist/native/airlock-tracer   the host syscall tracer (without it the ns lane
//                                                    observes with strace, slower)
//   native/scopefs.c -> dist/native/airlock-scopefs  every host read and write inside a scope (without
//                                                    it scoped runs and promotion refuse to run)
//   native/exec-shim.c -> dist/native/airlock-exec   the first program of a sandbox started ahead of
//                                                    need (without it every run starts its own)
//   native/idmap.c   -> dist/native/airlock-idmap    idmapped clones of scopes (without it runs that
//                                                    may write a scope share the sandbox user's uid)
// Without a compiler the build goes on and says what is missing. `--optional` (the package's
// postinstall) also goes on when the compiler fails, saying so: an install must not fail on a
// helper the host can do without or refuse cleanly without.
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';

const helpers = [
  { src: 'native/tracer.c', out: 'dist/native/airlock-tracer', without: 'the ns lane will observe syscalls with strace (slower)' },
  { src: 'native/scopefs.c', out: 'dist/native/airlock-scopefs', without: 'runs with a declared scope and promotion will refuse to run' },
  { src: 'native/exec-shim.c', out: 'dist/native/airlock-exec', without: 'no sandbox is started ahead of need (every run starts its own)' },
  { src: 'native/idmap.c', out: 'dist/native/airlock-idmap', without: 'runs that may write a scope will share the sandbox user\'s uid' },
];
const optional = process.argv.includes('--optional');
const cc = ['cc', 'gcc', 'clang'].find((c) => spawnSync(c, ['--version'], { stdio: 'ignore' }).status === 0);
for (const h of helpers) rmSync(h.out, { force: true });
if (!cc) {
  for (const h of helpers) console.warn(`build-native: no C compiler (cc/gcc/clang): ${h.out} not built; ${h.without}. apt-get install gcc libc6-dev to build it.`);
} else {
  mkdirSync('dist/native', { recursive: true });
  for (const h of helpers) {
    const r = spawnSync(cc, ['-O2', '-Wall', '-Wextra', '-Werror', '-o', h.out, h.src], { stdio: 'inherit' });
    if (r.status !== 0) {
      console.error(`build-native: ${cc} failed to build ${h.src}${optional ? `; ${h.without}` : ''}`);
      if (!optional) process.exit(1);
    }
  }
}
