// Bundles the CLI: Node resolves and compiles a few files instead of hundreds, which is most of
// `airlock check`'s start-up time. Subcommands load their code on demand (code splitting), so
// `check` does not pay for the sandbox or the stores.
import { build } from 'esbuild';

await build({
  entryPoints: { airlock: 'src/cli/main.ts', 'monty-worker': 'src/sandbox/lanes/monty-worker.ts' },
  outdir: 'dist/bundle',
  entryNames: '[name]',
  chunkNames: 'chunks/[name]-[hash]',
  bundle: true,
  splitting: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  minify: true,
  sourcemap: 'linked',
  external: ['better-sqlite3', 'pg', 'nats', '@nats-io/*', '@pydantic/monty', 'pg-native'],
  banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
  logLevel: 'warning',
});
