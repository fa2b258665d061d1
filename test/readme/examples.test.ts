import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, test } from 'node:test';
import pg from 'pg';
import { connectNats } from '../../src/utp/connect.js';
import { repoPath } from '../helpers/paths.js';
import { NATS_URL, PG_URL } from '../store/services.js';
import { TEST_SCOPE_ROOT } from '../helpers/workspace.js';

/**
 * The README's examples, run as a new user runs them: every ```sh block marked
 * `<!-- example:NAME -->`, in the README's order, with bash from the repository root, in a fresh
 * HOME (so ~/.airlock and ~/.config/airlock/keys start empty). Each command's exit status must be
 * what its comment says (`# exit N`, else 0), and each example's key output is checked below. When
 * the README drifts from what Airlock does, this fails. The only changes made to the commands give
 * the example its own port, NATS stream, project and PostgreSQL schema (other tests share the
 * machine); each swap fails when the README no longer has the text it replaces.
 */

const ORDER = ['check', 'exec', 'show', 'sandbox', 'gate', 'monty', 'promote', 'network', 'utp'];

interface Example {
  name: string;
  commands: string[];
}

/** The marked blocks of README.md, each split into commands (comment-only and blank lines dropped). */
function readmeExamples(): Example[] {
  const text = readFileSync(repoPath('README.md'), 'utf8');
  const out: Example[] = [];
  const marker = /<!-- example:([a-z0-9-]+) -->\n```sh\n([\s\S]*?)\n```/g;
  for (const m of text.matchAll(marker)) {
    const commands: string[] = [];
    let pending = '';
    for (const line of (m[2] ?? '').split('\n')) {
      if (pending === '' && (line.trim() === '' || line.trim().startsWith('#'))) continue;
      if (line.endsWith('\\')) pending += `${line}\n`;
      else {
        commands.push(pending + line);
        pending = '';
      }
    }
    out.push({ name: m[1] ?? '', commands });
  }
  return out;
}

/** The exit status a command's comment promises (`# exit 2, ...`), else 0. */
function expectedExit(command: string): number {
  const comment = command.match(/\s#\s(.*)$/)?.[1] ?? '';
  const m = comment.match(/\bexit (\d+)/);
  return m ? Number(m[1]) : 0;
}

function swap(text: string, from: string, to: string): string {
  assert.ok(text.includes(from), `the README example no longer contains ${from}: update test/readme/examples.test.ts with the README`);
  return text.split(from).join(to);
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

const tag = `readme${randomBytes(4).toString('hex')}`;
const stream = `AIRLOCK_${tag.toUpperCase()}`;
const base = TEST_SCOPE_ROOT;
mkdirSync(base, { recursive: true, mode: 0o755 });
// Not under /tmp: the examples' scopes live in HOME, and the sandbox refuses scopes under /tmp.
const home = mkdtempSync(join(base, 'readme-home-'));

after(async () => {
  rmSync(home, { recursive: true, force: true });
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect().then(() => client.query(`DROP SCHEMA IF EXISTS ${tag} CASCADE`)).catch(() => undefined);
  await client.end().catch(() => undefined);
  const nc = await connectNats(NATS_URL).catch(() => null);
  if (nc) {
    await (await nc.jetstreamManager()).streams.delete(stream).catch(() => undefined);
    await nc.close();
  }
});

/** The test's environment with HOME the fresh one and no Airlock settings (the README's defaults apply). */
function freshEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, HOME: home };
  for (const k of ['AIRLOCK_HOME', 'AIRLOCK_KEYS', 'AIRLOCK_DB']) delete env[k];
  return env;
}

interface Ran {
  command: string;
  code: number;
  output: string;
}

/** Runs one example's commands in one bash, in order; each command's output and exit status. */
function runExample(ex: Example): Ran[] {
  const lines = ['trap \'kill $(jobs -p) 2>/dev/null\' EXIT'];
  ex.commands.forEach((c, i) => lines.push(`echo "@@@begin ${i}"`, c, `echo "@@@end ${i} $?"`));
  const r = spawnSync('bash', ['-c', `exec 2>&1\n${lines.join('\n')}\n`], {
    cwd: repoPath(),
    encoding: 'utf8',
    timeout: 120_000,
    env: freshEnv(),
  });
  const ran: Ran[] = [];
  const out = r.stdout ?? '';
  ex.commands.forEach((command, i) => {
    const begin = out.indexOf(`@@@begin ${i}\n`);
    const end = out.search(new RegExp(`@@@end ${i} (\\d+)\\n`));
    assert.ok(begin >= 0 && end > begin, `example ${ex.name}: command ${i + 1} (${command}) did not finish:\n${out.slice(-3000)}\n${r.error?.message ?? ''}`);
    const code = Number(out.slice(end).match(/^@@@end \d+ (\d+)/)?.[1]);
    ran.push({ command, code, output: out.slice(begin + `@@@begin ${i}\n`.length, end) });
  });
  return ran;
}

test('README examples run in order on a fresh HOME, as written', { timeout: 300_000 }, async () => {
  const examples = readmeExamples();
  assert.deepEqual(examples.map((e) => e.name), ORDER, 'the README\'s marked examples, in order');
  const port = String(await freePort());
  const byName = new Map<string, Ran[]>();
  for (const ex of examples) {
    let commands = ex.commands;
    if (ex.name === 'network') commands = commands.map((c) => c.split('8000').join(port));
    if (ex.name === 'utp') {
      const block = swap(swap(swap(swap(commands.join('\n'),
        'postgres://postgres@127.0.0.1/test', `${PG_URL}?schema=${tag}`),
        '--project demo', `--project ${tag}`),
        'serve --nats nats://127.0.0.1:4222', `serve --stream ${stream} --durable ${tag} --nats ${NATS_URL}`),
        'nats://127.0.0.1:4222', NATS_URL);
      commands = block.split('\n');
    }
    const ran = runExample({ name: ex.name, commands });
    for (const r of ran) {
      assert.equal(r.code, expectedExit(r.command), `example ${ex.name}: \`${r.command}\` exited ${r.code}, the README says ${expectedExit(r.command)}:\n${r.output}`);
    }
    byName.set(ex.name, ran);
  }
  const out = (name: string, i: number): string => byName.get(name)?.[i]?.output ?? '';
  // stdout and stderr share one pipe here: the JSON document is the outermost {...}.
  const json = (text: string): { [k: string]: unknown } => JSON.parse(text.slice(text.indexOf('{'), text.lastIndexOf('}') + 1));

  // check: valid examples, a rejection with its code, JSON, an explanation, warnings.
  assert.match(out('check', 0), /valid tool-request/);
  assert.match(out('check', 1), /TR_COMMAND_CHAINING/);
  assert.equal(json(out('check', 2)).valid, true);
  assert.match(out('check', 3), /TR_COMMAND_PIPE/);
  assert.match(out('check', 4), /UTPS_TOOL_TAMPERED \(utp service\)/);
  assert.match(out('check', 5), /warning/);

  // exec: live output then PROMOTE; the changes shown, then applied by --promote; the time limit.
  assert.match(out('exec', 0), /verdict PROMOTE/);
  assert.match(out('exec', 3), /\+ .*airlock-example\/project\/out\.txt/);
  assert.equal(readFileSync(join(home, 'airlock-example/project/out.txt'), 'utf8'), 'built\n');
  assert.match(out('exec', 5), /input\.csv/);

  // show: the newest run's id and its page.
  assert.match(out('show', 2), /^sbx-\S+\n$/);
  assert.match(out('show', 3), /PROMOTE|BLOCK|REQUIRE_CONFIRMATION/);
  assert.ok(json(out('show', 4)));

  // sandbox: doctor, a run, the Sandbox Result as JSON.
  assert.match(out('sandbox', 1), /PROMOTE/);
  assert.equal((json(out('sandbox', 2)).verdict as { recommended_action: string }).recommended_action, 'PROMOTE');

  // gate: one keygen, an approval, the gate accepts the result.
  assert.match(out('gate', 1), /added to .*policy\.yaml/);
  assert.match(out('gate', 3), /approved and signed by alice/);
  assert.match(out('gate', 4), /ACCEPT -> inbound\//);
  assert.match(out('gate', 5), /accepted in inbound\/ \(1\)/);

  assert.match(out('monty', 0), /PROMOTE/);

  // promote: confirmed, promoted (app.log gone), rolled back (app.log back); notes.txt never touched.
  assert.match(out('promote', 2), /REQUIRE_CONFIRMATION/);
  assert.match(out('promote', 6), /promoted/);
  assert.equal(readFileSync(join(home, 'airlock-example/app/logs/app.log'), 'utf8'), 'old\n');
  assert.equal(readFileSync(join(home, 'airlock-example/app/logs/notes.txt'), 'utf8'), 'keep\n');
  assert.match(out('promote', 8), /promot/i);

  // network: the local server's file through the proxy; without --net, BLOCK.
  assert.match(out('network', 3), /Airlock/);
  assert.match(out('network', 4), /BLOCK/);

  // utp: the PostgreSQL path end to end: the tool registered signed by alice (her key from the gate
  // example), the call's answer came back through the worker's store.
  assert.match(out('utp', 2), /registered .*\/python\.run on .*, signed by alice \(key [0-9a-f]{16}\)/);
  assert.match(out('utp', 4), /"status":"success"/);
  assert.match(out('utp', 4), /42\\n/);

  // keygen again, as a reader who runs the gate example twice: nothing to do, exit 0.
  const again = spawnSync(repoPath('bin/airlock'), ['keygen', '--operator', 'alice'], { encoding: 'utf8', env: freshEnv() });
  assert.equal(again.status, 0, again.stderr);
  assert.match(again.stdout, /already trusts it: nothing to do/);
  assert.ok(!existsSync(join(repoPath(), 'worker.log')));
});
