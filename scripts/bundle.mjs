// Bundles the CLI for a fast start: one CommonJS file that the launcher (scripts/launch.cjs)
// compiles with a V8 code cache, so `airlock check` pays neither module resolution nor most of
// the compilation. Subcommands' code is initialised only when they run (esbuild turns their
// dynamic imports into lazy module initialisers). The Monty worker is its own ESM entry.
import { copyFileSync, rmSync } from 'node:fs';
import { build } from 'esbuild';

rmSync('dist/bundle', { recursive: true, force: true });
const common = { bundle: true, platform: 'node', target: 'node20', minify: true, sourcemap: 'linked', logLevel: 'warning' };
await build({
  ...common,
  entryPoints: ['src/cli/main.ts'],
  outfile: 'dist/bundle/airlock.cjs',
  format: 'cjs',
  external: ['better-sqlite3', 'pg', 'pg-native', 'nats', '@pydantic/monty'],
  define: { 'import.meta.url': '__airlockFileUrl' },
  banner: { js: "const __airlockFileUrl = require('node:url').pathToFileURL(__filename).href;" },
});
await build({
  ...common,
  entryPoints: ['src/sandbox/lanes/monty-worker.ts'],
  outfile: 'dist/bundle/monty-worker.js',
  format: 'esm',
  external: ['@pydantic/monty'],
  banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
});
copyFileSync('scripts/launch.cjs', 'dist/bundle/launch.cjs');
