// The CLI's rough edges (issue 19): one meaning per exit status across commands, usage errors that
// say what to do (never "internal error"), a JSON document whenever --json is asked, one JSON log
// shape for every service.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from 'nats';
import { airlock } from '../helpers/cli.js';
import { repoPath } from '../helpers/paths.js';

const workspace = (): string => {
  const ws = mkdtempSync(join(tmpdir(), 'airlock-ws-'));
  assert.equal(airlock(['init', ws]).code, 0);
  return ws;
};

test('airlock --help documents the exit statuses: 0 ok, 2 rejected or bad input, 3 internal; exec keeps its own', () => {
  const h = airlock(['--help']);
  assert.equal(h.code, 0);
  assert.match(h.stdout, /Exit status, for every command but exec:\n {2}0 {2}done/);
  assert.match(h.stdout, /^ {2}2 {2}rejected or bad input/m);
  assert.match(h.stdout, /^ {2}3 {2}internal or sandbox error/m);
  assert.match(h.stdout, /124 time limit, 125 nothing ran, 126 BLOCK/);
});

test('check with no files is a usage error (2), not an internal error', () => {
  const r = airlock(['check']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^airlock check: give at least one file to check/);
  assert.doesNotMatch(r.stderr, /internal error|at .*\.cjs/);
});

test('a missing file is the same status for check and run: 2 (bad input); run --json still prints a JSON document', () => {
  const ws = workspace();
  const missing = join(ws, 'no-such-request.md');
  assert.equal(airlock(['check', missing]).code, 2);
  const run = airlock(['run', missing, '--workspace', ws]);
  assert.equal(run.code, 2);
  const json = airlock(['run', missing, '--workspace', ws, '--json']);
  assert.equal(json.code, 2);
  const doc = JSON.parse(json.stdout) as { rejected: boolean; problems: { code: string }[] };
  assert.equal(doc.rejected, true);
  assert.ok(doc.problems.length > 0);
  // An invalid request too: rejected before running, with the rule codes in the document.
  const bad = join(ws, 'TR-20260101-000000Z-bad.md');
  writeFileSync(bad, '---\nrequest_id: x\n---\n');
  const inv = airlock(['run', bad, '--workspace', ws, '--json']);
  assert.equal(inv.code, 2);
  assert.ok((JSON.parse(inv.stdout) as { problems: unknown[] }).problems.length > 0);
});

test('usage errors are 2 everywhere (exec: 125, nothing ran); --log-format accepts text or json only; history and show of an unknown id exit 2 with a message', () => {
  const ws = workspace();
  const xml = airlock(['serve', '--once', '--log-format', 'xml', '--workspace', ws]);
  assert.equal(xml.code, 2);
  assert.match(xml.stderr, /'xml' is invalid\. Allowed choices are text, json/);
  assert.equal(airlock(['no-such-command']).code, 2);
  assert.equal(airlock(['run']).code, 2, 'a missing argument');
  assert.equal(airlock(['exec', '--timeout', 'soon', '--', 'true']).code, 125);
  const h = airlock(['history', '3f1c2a9e-0000-4c1e-9a2f-000000000000', '--workspace', ws]);
  assert.equal(h.code, 2);
  assert.match(h.stderr, /no audit records for action 3f1c2a9e-0000/);
  assert.equal(airlock(['history', 'x', '--workspace', join(ws, 'nope')]).code, 2, 'no such workspace');
  assert.equal(airlock(['show', 'sbx-none', '--workspace', ws]).code, 2);
});

const BASE_FIELDS = ['level', 'time', 'pid', 'hostname', 'service', 'event'];

test('the folder gate and the UTP service log one JSON shape: the same base fields, level by name, ISO time', async () => {
  const ws = workspace();
  const gate = airlock(['serve', '--once', '--log-format', 'json', '--workspace', ws]);
  assert.equal(gate.code, 0, gate.stderr);
  const gateLine = JSON.parse(gate.stdout.trim().split('\n').pop() ?? '') as Record<string, unknown>;

  const keys = join(ws, 'keys');
  assert.equal(airlock(['keygen', '--operator', 'ops', '--key-dir', keys, '--workspace', ws]).code, 0);
  const tool = airlock(['tools', 'add', 'python.run', '--builtin', 'python.run', '--project', 'logtest', '--channel', 'main', '--operator', 'ops', '--key-dir', keys, '--workspace', ws]);
  assert.equal(tool.code, 0, tool.stderr);
  const stream = `AIRLOCK_LOGTEST_${process.pid}_${Date.now()}`;
  const child = spawn(repoPath('bin/airlock'), ['serve', '--nats', 'nats://127.0.0.1:4222', '--stream', stream, '--durable', `${stream}_d`, '--workspace', ws], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d));
  try {
    await new Promise<void>((res, rej) => {
      const t = setTimeout(() => rej(new Error(`no log line from the UTP service: ${out}${err}`)), 30_000);
      child.on('close', (code) => rej(new Error(`the UTP service ended (${code}) before its first log line: ${out}${err}`)));
      child.stdout.on('data', (d: Buffer) => {
        out += d;
        // Its first lines name the tools it loaded (tool-registered), then it says it is serving.
        if (/"event":"serving".*\n/.test(out)) {
          clearTimeout(t);
          res();
        }
      });
    });
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.on('close', r));
    const nc = await connect({ servers: 'nats://127.0.0.1:4222' });
    await (await nc.jetstreamManager()).streams.delete(stream).catch(() => undefined);
    await nc.close();
  }
  const utpLine = JSON.parse(out.split('\n').find((l) => l.includes('"event":"serving"')) ?? '') as Record<string, unknown>;
  for (const [name, line] of [['gate', gateLine], ['utp', utpLine]] as const) {
    for (const f of BASE_FIELDS) assert.ok(f in line, `${name} log has ${f}: ${JSON.stringify(line)}`);
    assert.equal(line.level, 'info');
    assert.match(String(line.time), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.equal(typeof line.pid, 'number');
  }
  assert.equal(gateLine.service, 'airlock-gate');
  assert.equal(utpLine.service, 'airlock-utp');
  assert.equal(utpLine.event, 'serving');
  assert.deepEqual(Object.keys(gateLine).slice(0, 5), Object.keys(utpLine).slice(0, 5), 'the base fields in the same order');
});
