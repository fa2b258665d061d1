import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { connectNats } from '../../src/utp/connect.js';
import { NATS_URL } from '../store/services.js';

/**
 * Issue 18.5: Airlock is a package people install. This packs the built checkout with `npm pack`,
 * installs the tarball into a new project with npm, compiles the README's two snippets (taken
 * from README.md by their markers, so a README that drifts fails here) with `tsc --strict`
 * against the installed package's own declarations, and runs them against a worker started from
 * the installed `airlock` command on the real NATS.
 *
 * Dependencies come through npm as a user's would (`--prefer-offline`: the npm cache, else the
 * registry), with `--ignore-scripts` for one reason: better-sqlite3 has no prebuilt binary for
 * this machine and compiles for ~10 minutes. Its compiled addon is copied from this checkout's
 * node_modules instead (same version, same Node; checked). Our own install script (the native
 * helpers) then runs through `npm rebuild @airlock-host/airlock`, as the README tells users of
 * `--ignore-scripts`.
 */

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const pkg = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { name: string; bin: Record<string, string>; exports: Record<string, string | Record<string, string>>; main: string; types: string };
const tmp = mkdtempSync(join(tmpdir(), 'airlock-pkg-'));
chmodSync(tmp, 0o755); // the sandbox (host nobody) reads the installed Monty worker below it
after(() => rmSync(tmp, { recursive: true, force: true }));

function sh(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env, timeout = 120_000): string {
  const r = spawnSync(cmd, args, { cwd, env, encoding: 'utf8', timeout, maxBuffer: 64 * 1024 * 1024 });
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')} (in ${cwd}) failed: ${r.error?.message ?? ''}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/** The ```ts block that follows `<!-- snippet:NAME` in README.md. */
function snippet(name: string): string {
  const readme = readFileSync(join(repo, 'README.md'), 'utf8');
  const at = readme.indexOf(`<!-- snippet:${name}`);
  assert.ok(at >= 0, `README.md has no <!-- snippet:${name} --> marker`);
  const m = /```ts\n([\s\S]*?)```/.exec(readme.slice(at));
  assert.ok(m?.[1], `no \`\`\`ts block after the ${name} marker`);
  return m[1];
}

/** Replaces a literal the test must change (a unique project, the test's NATS), failing if the README no longer has it. */
function swap(text: string, from: string, to: string): string {
  assert.ok(text.includes(from), `the snippet no longer contains ${from}: update this test with the README`);
  return text.split(from).join(to);
}

let worker: ChildProcess | undefined;
let stream: string | undefined;
after(async () => {
  if (worker && worker.exitCode === null) {
    const gone = new Promise((r) => worker?.once('exit', r));
    worker.kill('SIGTERM');
    await Promise.race([gone, new Promise((r) => setTimeout(r, 10_000))]);
    if (worker.exitCode === null) worker.kill('SIGKILL');
  }
  if (stream) {
    const nc = await connectNats(NATS_URL);
    await (await nc.jetstreamManager()).streams.delete(stream).catch(() => undefined);
    await nc.close();
  }
});

test('npm pack ships what bin and exports need, and nothing of the tests', () => {
  const [packed] = JSON.parse(sh('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], repo)) as { files: { path: string }[] }[];
  const files = new Set(packed?.files.map((f) => f.path));
  const targets = [...Object.values(pkg.bin), pkg.main, pkg.types, ...Object.values(pkg.exports).flatMap((e) => (typeof e === 'string' ? [e] : Object.values(e)))]
    .filter((t) => !t.includes('*'))
    .map((t) => t.replace(/^\.\//, ''));
  // bin/airlock starts dist/bundle/launch.cjs, which runs airlock.cjs; the Monty lane's worker and the native helpers' sources go too.
  for (const f of [...targets, 'dist/bundle/launch.cjs', 'dist/bundle/airlock.cjs', 'dist/bundle/monty-worker.js', 'native/tracer.c', 'native/scopefs.c', 'scripts/build-native.mjs', 'schemas/action-descriptor.schema.json']) {
    assert.ok(files.has(f), `the package lacks ${f}`);
  }
  const stray = [...files].filter((f) => f.startsWith('dist/test/') || f.startsWith('test/') || f.startsWith('src/') || f.startsWith('dist/native/') || f.endsWith('.v8cache') || f.endsWith('.map'));
  assert.deepEqual(stray, []);
});

test('installed from its tarball: both README snippets compile with tsc --strict and run against a worker on NATS', { timeout: 240_000 }, async () => {
  const tarball = join(tmp, JSON.parse(sh('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', tmp], repo))[0].filename);
  const proj = join(tmp, 'proj');
  mkdirSync(proj);
  writeFileSync(join(proj, 'package.json'), JSON.stringify({ name: 'airlock-user', private: true, type: 'module' }));
  sh('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--ignore-scripts', tarball], proj);
  const installed = join(proj, 'node_modules', ...pkg.name.split('/'));
  assert.ok(existsSync(join(installed, 'dist', 'src', 'api', 'host.d.ts')));

  // better-sqlite3's addon from this checkout (see above), only when it is the very same version.
  const version = (dir: string) => (JSON.parse(readFileSync(join(dir, 'better-sqlite3', 'package.json'), 'utf8')) as { version: string }).version;
  assert.equal(version(join(proj, 'node_modules')), version(join(repo, 'node_modules')), 'better-sqlite3 differs from the checkout\'s: the addon cannot be reused');
  mkdirSync(join(proj, 'node_modules', 'better-sqlite3', 'build', 'Release'), { recursive: true });
  copyFileSync(join(repo, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node'), join(proj, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node'));
  // The package's postinstall: the native helpers from their shipped sources.
  sh('npm', ['rebuild', pkg.name, '--ignore-scripts=false'], proj);
  assert.ok(existsSync(join(installed, 'dist', 'native', 'airlock-scopefs')), 'postinstall did not build the scope agent');

  // The README's snippets, pointed at a project of their own on the test's NATS.
  const project = `pkg${randomBytes(4).toString('hex')}`;
  const local = (s: string) => swap(swap(s, "project: 'demo'", `project: '${project}'`), "'nats://127.0.0.1:4222'", `'${NATS_URL}'`);
  writeFileSync(join(proj, 'client.ts'), local(snippet('utp-client')));
  writeFileSync(join(proj, 'library.ts'), local(snippet('library')));
  copyFileSync(join(repo, 'examples', 'requests', 'TR-20260211-140000Z-monty-fib.md'), join(proj, 'TR-20260211-140000Z-monty-fib.md'));
  const types = join(repo, 'node_modules', '@types');
  const tsc = join(repo, 'node_modules', 'typescript', 'bin', 'tsc');
  // No skipLibCheck: the package's own declarations are checked as a strict user's would be.
  sh(process.execPath, [tsc, '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--typeRoots', types, '--types', 'node', '--outDir', 'out', 'client.ts', 'library.ts'], proj);

  // A worker from the installed command, with the README's tool, in a workspace of its own.
  const ws = join(tmp, 'ws');
  const env = { ...process.env, AIRLOCK_HOME: ws, AIRLOCK_KEYS: join(tmp, 'keys') };
  const airlock = join(proj, 'node_modules', '.bin', 'airlock');
  sh(airlock, ['keygen', '--operator', 'ops'], proj, env);
  sh(airlock, ['tools', 'add', 'python.run', '--builtin', 'python.run', '--project', project, '--channel', 'main', '--operator', 'ops'], proj, env);
  stream = `AIRLOCK_PKG_${project.toUpperCase()}`;
  worker = spawn(airlock, ['serve', '--nats', NATS_URL, '--stream', stream, '--durable', `${project}-d`], { cwd: proj, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`the worker did not start in 30 s:\n${log}`)), 30_000);
    // The service logs its JSON lines on stdout, problems on stderr: watch both.
    const watch = (b: Buffer): void => {
      log += b.toString();
      if (log.includes('"serving"')) {
        clearTimeout(t);
        resolve();
      }
    };
    worker?.stdout?.on('data', watch);
    worker?.stderr?.on('data', watch);
    worker?.once('exit', (code) => reject(new Error(`the worker ended (${code}):\n${log}`)));
  });

  // The client snippet ends by itself (it closes NATS and the store) with the call's answer.
  const started = Date.now();
  const client = spawnSync(process.execPath, ['out/client.js'], { cwd: proj, env, encoding: 'utf8', timeout: 60_000 });
  assert.equal(client.status, 0, `client: ${client.error?.message ?? ''}\n${client.stdout}\n${client.stderr}\nworker:\n${log}`);
  assert.match(client.stdout, /'success'/);
  assert.match(client.stdout, /text: '2\\n'/);
  assert.ok(Date.now() - started < 30_000, 'the client snippet did not end promptly');

  // The facade: a run through the host core (door "library") and a UTP call, then close().
  const lib = spawnSync(process.execPath, ['out/library.js'], { cwd: proj, env, encoding: 'utf8', timeout: 60_000 });
  assert.equal(lib.status, 0, `library: ${lib.error?.message ?? ''}\n${lib.stdout}\n${lib.stderr}\nworker:\n${log}`);
  const [runLine, callLine] = lib.stdout.trim().split('\n');
  const sandboxId = /^(sbx-\S+) PROMOTE$/.exec(runLine ?? '')?.[1];
  assert.ok(sandboxId, `run: ${lib.stdout}`);
  assert.equal(callLine, 'success');
  const record = JSON.parse(readFileSync(join(ws, 'runs', sandboxId, 'record.json'), 'utf8')) as { door: string; decision: { source: string } };
  assert.equal(record.door, 'library');
  assert.match(record.decision.source, /^terminal:/);
  assert.ok(readdirSync(join(ws, 'runs')).length >= 1);
});
