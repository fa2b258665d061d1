import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { serveGate } from '../../src/gates/service.js';
import { openWorkspace } from '../../src/workspace/workspace.js';
import { airlock } from '../helpers/cli.js';
import { repoPath } from '../helpers/paths.js';

// requests_in/, results_out/, inbound/, quarantine/ are the workspace's data folders: the AI's side
// may be given write access to them (workspace/safety.ts checks only what Airlock keeps). What is
// left there must neither make the gate (root) write elsewhere nor stop it from serving the rest.

const silent = { info: () => {}, warn: () => {} };
const noAudit = { append: () => undefined };
const notARequest = '---\nrequest_type: tool_request\n---\nnot a request\n';

test('a link planted at the temporary name of a quarantine reasons file does not make the gate write through it', async () => {
  const ws = openWorkspace(mkdtempSync(join(tmpdir(), 'airlock-gate-files-')), { init: true });
  const outside = mkdtempSync(join(tmpdir(), 'airlock-victim-'));
  const victim = join(outside, 'victim');
  writeFileSync(victim, 'precious\n');
  const name = 'TR-20260301-120000Z-bad.md';
  writeFileSync(join(ws.requestsIn, name), notARequest);
  // The name the gate used for its temporary file: `.<name>.<pid>.tmp` beside the target.
  symlinkSync(victim, join(ws.quarantine, `.${name}.reasons.json.${process.pid}.tmp`));
  await serveGate({ ws, log: silent, audit: noAudit, once: true });
  assert.equal(readFileSync(victim, 'utf8'), 'precious\n', 'root wrote through a link in quarantine/');
  const reasons = JSON.parse(readFileSync(join(ws.quarantine, `${name}.reasons.json`), 'utf8')) as { problems: unknown[] };
  assert.ok(reasons.problems.length > 0, 'the request is still quarantined with its reasons');
});

test('a folder or a fifo named like a request in requests_in/ neither crashes nor stalls the gate; the other requests are served', () => {
  const root = mkdtempSync(join(tmpdir(), 'airlock-gate-files-'));
  assert.equal(airlock(['init', root]).code, 0);
  const ws = openWorkspace(root);
  mkdirSync(join(ws.requestsIn, 'TR-20260301-120000Z-a-dir.md'));
  assert.equal(spawnSync('mkfifo', [join(ws.requestsIn, 'TR-20260301-120000Z-b-fifo.md')]).status, 0);
  symlinkSync('/dev/zero', join(ws.requestsIn, 'TR-20260301-120000Z-c-zero.md'));
  writeFileSync(join(ws.requestsIn, 'TR-20260301-120000Z-d-bad.md'), notARequest);
  const r = spawnSync(repoPath('bin/airlock'), ['serve', '--workspace', root, '--once'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.error, undefined, `serve stalled: ${r.error}`);
  assert.equal(r.status, 0, r.stderr);
  const quarantined = readdirSync(ws.quarantine);
  for (const n of ['a-dir', 'b-fifo', 'c-zero', 'd-bad']) {
    assert.ok(quarantined.includes(`TR-20260301-120000Z-${n}.md.reasons.json`), `${n} not quarantined: ${quarantined.join(', ')}`);
  }
  assert.deepEqual(readdirSync(ws.requestsIn), []);
  assert.ok(!existsSync(join(ws.running, 'TR-20260301-120000Z-a-dir.md')));
});

test('a request named with a newline cannot forge a line of the gate\'s text log: each line is one event, controls written as \\uXXXX', () => {
  const root = mkdtempSync(join(tmpdir(), 'airlock-gate-files-'));
  assert.equal(airlock(['init', root]).code, 0);
  const ws = openWorkspace(root);
  const forged = 'TR-20260301-120000Z-zzz: ACCEPT (SUCCESS, exit 0, ALLOW, 0.20 s)';
  writeFileSync(join(ws.requestsIn, `TR-20260301-120000Z-x\n${forged}\n\u001b[2Ky.md`), notARequest);
  const r = spawnSync(repoPath('bin/airlock'), ['serve', '--workspace', root, '--once'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  const lines = `${r.stdout}${r.stderr}`.split('\n');
  assert.ok(!lines.some((l) => l.startsWith(forged)), `a forged line:\n${r.stdout}${r.stderr}`);
  assert.ok(!(r.stdout + r.stderr).includes('\u001b'), 'an escape sequence reached the log');
  assert.ok(lines.some((l) => l.includes('x\\u000aTR-20260301-120000Z-zzz: ACCEPT')), `the name, inert, in one line:\n${r.stdout}${r.stderr}`);
});
