// The services' JSON log is written to stdout in blocks (not one write per line): every line still
// reaches stdout when the process exits at once, and a lone line while it keeps running.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { repoPath } from '../helpers/paths.js';

const logModule = repoPath('dist/src/base/json-log.js');

function run(script: string, untilLines: number): Promise<{ lines: Record<string, unknown>[]; exited: boolean }> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`only ${out.split('\n').length - 1} lines: ${out.slice(-300)}`));
    }, 10_000);
    const done = (exited: boolean) => {
      clearTimeout(t);
      resolve({ lines: out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>), exited });
    };
    child.stdout.on('data', (d: Buffer) => {
      out += d;
      if (out.split('\n').length - 1 >= untilLines && child.exitCode === null) {
        child.kill('SIGKILL');
        done(false);
      }
    });
    child.on('close', () => done(true));
  });
}

test('every line written before an immediate process.exit() is on stdout, in order', async () => {
  const r = await run(`const { jsonLog } = await import(${JSON.stringify(logModule)}); const log = jsonLog('airlock-utp'); for (let i = 0; i < 500; i++) log.write('info', 'answered', { n: i }); process.exit(0);`, Infinity);
  assert.equal(r.exited, true);
  assert.deepEqual(r.lines.map((l) => l.n), Array.from({ length: 500 }, (_, i) => i));
  assert.equal(r.lines[0]?.service, 'airlock-utp');
});

test('a lone line reaches stdout while the service keeps running (the block is flushed on a timer)', async () => {
  const r = await run(`const { jsonLog } = await import(${JSON.stringify(logModule)}); jsonLog('airlock-gate').write('info', 'serving', { n: 1 }); setInterval(() => undefined, 1000);`, 1);
  assert.equal(r.exited, false, 'the line came while the process ran');
  assert.equal(r.lines[0]?.event, 'serving');
});
