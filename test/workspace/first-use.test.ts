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

test('eight processes opening one new workspace at once: all succeed, each reads a whole, valid policy', async () => {
  const dir = join(mkdtempSync(join(tmpdir(), 'airlock-first-')), 'ws');
  const script = `const { openWorkspace } = await import(${JSON.stringify(wsUrl)}); const { parsePolicy } = await import(${JSON.stringify(policyUrl)}); const fs = await import('node:fs');
const ws = openWorkspace(${JSON.stringify(dir)}); const p = parsePolicy(fs.readFileSync(ws.policyFile, 'utf8')); console.log(p.ok ? 'ok' : JSON.stringify(p.problems));`;
  const outs = await Promise.all(
    Array.from({ length: 8 }, () => {
      const c = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      c.stdout.on('data', (d: Buffer) => (out += d));
      c.stderr.on('data', (d: Buffer) => (out += d));
      return new Promise<string>((r) => c.on('close', (code) => r(`${code} ${out.trim()}`)));
    }),
  );
  assert.deepEqual(outs, Array(8).fill('0 ok'));
  assert.ok(parsePolicy(readFileSync(join(dir, 'policy.yaml'), 'utf8')).ok);
  assert.deepEqual(readdirSync(dir).filter((n) => n.includes('.tmp-')), [], 'no temporary file left behind');
});
