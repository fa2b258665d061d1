import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { PostgresStore } from '../../src/store/postgres.js';
import { PG_URL, uniqueName } from './services.js';

test('a program that uses the PostgreSQL store and never closes it still ends (its held connections keep nothing alive)', { timeout: 60_000 }, async (t) => {
  const schema = uniqueName('airlock_exit');
  t.after(async () => {
    const s = new PostgresStore(PG_URL, { schema });
    await s.init();
    await s.dropSchema();
    await s.close();
  });
  const child = spawn(process.execPath, [new URL('./forgotten-close-child.js', import.meta.url).pathname, PG_URL, schema], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  const t0 = Date.now();
  const ended = await new Promise<number | null | 'hung'>((resolve) => {
    const timer = setTimeout(() => resolve('hung'), 30_000);
    child.on('close', (code) => { // after its output is all read, unlike 'exit'
      clearTimeout(timer);
      resolve(code);
    });
  });
  if (ended === 'hung') child.kill('SIGKILL');
  assert.equal(out, 'used\n', 'the program used the store');
  // The pool's idle connections close after its idle timeout (10 s); nothing else may hold the process.
  assert.equal(ended, 0, `the program ended on its own (after ${Date.now() - t0} ms)`);
});
