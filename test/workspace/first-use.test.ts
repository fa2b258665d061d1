// A workspace's first use (folders, default policy) is safe when several processes do it at once.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { parsePolicy } from '../../src/policy/policy.js';

const wsUrl = new URL('../../src/workspace/workspace.js', import.meta.url).href;
const policyUrl = new URL('../../src/policy/policy.js', import.meta.url).href;

/** Runs the module `script` in eight node processes at once; each answers "<exit code> <output>". */
function eightAtOnce(script: string): Promise<string[]> {
  return Promise.all(
    Array.from({ length: 8 }, () => {
      const c = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      c.stdout.on('data', (d: Buffer) => (out += d));
      c.stderr.on('data', (d: Buffer) => (out += d));
      return new Promise<string>((r) => c.on('close', (code) => r(`${code} ${out.trim()}`)));
    }),
  );
}

test('eight processes opening one new workspace at once: all succeed, each reads a whole, valid policy', async () => {
  const dir = join(mkdtempSync(join(tmpdir(), 'airlock-first-')), 'ws');
  const script = `const { openWorkspace } = await import(${JSON.stringify(wsUrl)}); const { parsePolicy } = await import(${JSON.stringify(policyUrl)}); const fs = await import('node:fs');
const ws = openWorkspace(${JSON.stringify(dir)}); const p = parsePolicy(fs.readFileSync(ws.policyFile, 'utf8')); console.log(p.ok ? 'ok' : JSON.stringify(p.problems));`;
  const outs = await eightAtOnce(script);
  assert.deepEqual(outs, Array(8).fill('0 ok'));
  assert.ok(parsePolicy(readFileSync(join(dir, 'policy.yaml'), 'utf8')).ok);
  assert.deepEqual(readdirSync(dir).filter((n) => n.includes('.tmp-')), [], 'no temporary file left behind');
});

const storeUrl = new URL('../../src/store/sqlite.js', import.meta.url).href;
const ledgerUrl = new URL('../../src/gates/ledger.js', import.meta.url).href;
const auditUrl = new URL('../../src/audit/index.js', import.meta.url).href;

test('eight processes making everything of a new workspace at once: folders, policy, store schema, ledger, audit key and head', async () => {
  const top = mkdtempSync(join(tmpdir(), 'airlock-first-'));
  const dir = join(top, 'ws');
  const key = join(top, 'keys', 'audit-seal.key'); // a new host key too: its creation races as well
  const script = `const { openWorkspace } = await import(${JSON.stringify(wsUrl)}); const { SqliteStore } = await import(${JSON.stringify(storeUrl)});
const { Ledger } = await import(${JSON.stringify(ledgerUrl)}); const { openAuditLog } = await import(${JSON.stringify(auditUrl)});
const ws = openWorkspace(${JSON.stringify(dir)});
const store = new SqliteStore(ws.root + '/airlock.db'); await store.init();
const ledger = new Ledger(ws.storeFile); const id = 'req-' + process.pid; if (!ledger.claim(id, 'x'.repeat(64))) throw new Error('claim'); ledger.finish(id, 'done', null, 'ok'); ledger.close();
const log = openAuditLog(ws.auditFile, { sealKeyFile: ${JSON.stringify(key)} });
for (let i = 0; i < 20; i++) log.append({ type: 'validated', request_id: id, detail: { i } });
await store.close(); console.log('ok');`;
  const outs = await eightAtOnce(script);
  assert.deepEqual(outs, Array(8).fill('0 ok'));
  const { Ledger } = await import(ledgerUrl);
  const ledger = new Ledger(join(dir, 'store', 'airlock.db'));
  assert.equal(ledger.all().filter((e: { state: string }) => e.state === 'done').length, 8, 'every claim is in the one ledger');
  ledger.close();
  const { openAuditLog } = await import(auditUrl);
  const report = openAuditLog(join(dir, 'audit', 'audit.jsonl'), { sealKeyFile: key }).verify();
  assert.deepEqual(report.problems, []);
  assert.equal(report.records, 160, 'one chain of every append, under one key');
  assert.deepEqual(readdirSync(join(top, 'keys')), ['audit-seal.key'], 'one key, no temporary file');
});
