// Bundles the CLI into one file: Node resolves and compiles one module instead of hundreds,
// which is most of `airlock check`'s start-up time.
import { build } from 'esbuild';

await build({
  entryPoints: ['src/cli/main.ts'],
  outfile: 'dist/airlock.mjs',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  minify: true,
  sourcemap: 'linked',
  external: ['better-sqlite3', 'pg', 'nats', '@pydantic/monty', 'pg-native'],
  banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
  logLevel: 'warning',
});
