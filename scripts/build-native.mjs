// Builds the host syscall tracer (native/tracer.c -> dist/native/airlock-tracer) with the system C
// compiler. Without one the build goes on and says so: the ns lane then observes with strace (slower).
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';

const out = 'dist/native/airlock-tracer';
const cc = ['cc', 'gcc', 'clang'].find((c) => spawnSync(c, ['--version'], { stdio: 'ignore' }).status === 0);
rmSync(out, { force: true });
if (!cc) {
  console.warn('build-native: no C compiler (cc/gcc/clang): airlock-tracer not built; the ns lane will observe syscalls with strace (slower). apt-get install gcc libc6-dev to build it.');
} else {
  mkdirSync('dist/native', { recursive: true });
  const r = spawnSync(cc, ['-O2', '-Wall', '-Wextra', '-Werror', '-o', out, 'native/tracer.c'], { stdio: 'inherit' });
  if (r.status !== 0) {
    console.error(`build-native: ${cc} failed to build native/tracer.c`);
    process.exit(1);
  }
}
