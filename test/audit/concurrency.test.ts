import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { AuditError, openAuditLog } from '../../src/audit/index.js';
import { logWith, readLinesOf, tempLogFile } from './helpers.js';

const worker = join(dirname(fileURLToPath(import.meta.url)), 'append-worker.js');

function run(file: string, count: number, id: number): Promise<number | null> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [worker, file, String(count), String(id)], { stdio: ['ignore', 'ignore', 'inherit'] });
    child.on('exit', (code) => resolve(code));
  });
}

test('4 processes x 200 appends at once make one valid chain of 800 records', { timeout: 120_000 }, async () => {
  const file = tempLogFile();
  const codes = await Promise.all([1, 2, 3, 4].map((id) => run(file, 200, id)));
  assert.deepEqual(codes, [0, 0, 0, 0]);
  const log = openAuditLog(file);
  const report = log.verify();
  assert.deepEqual(report.problems, []);
  assert.equal(report.records, 800);
  assert.deepEqual([report.firstSeq, report.lastSeq], [1, 800]);
  const lines = readLinesOf(file);
  assert.equal(lines.length, 800);
  // Each worker's own appends keep their order, and every one is there exactly once.
  for (const id of [1, 2, 3, 4]) {
    const mine = log.show().filter((r) => r.detail?.worker === id).map((r) => r.detail?.i);
    assert.deepEqual(mine, Array.from({ length: 200 }, (_, i) => i));
  }
});

test('a lock left by a dead process is broken; a live holder makes append time out with AUDIT_LOCK_TIMEOUT', () => {
  const { file, log } = logWith(1);
  const lock = join(dirname(file), 'audit.lock');
  const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  const deadPid = Number(dead.stdout);
  writeFileSync(lock, JSON.stringify({ pid: deadPid, host: hostname(), token: 'x', ts: new Date().toISOString() }));
  assert.equal(log.append({ type: 'ran' }).seq, 2);

  // The holder is alive (this very process, as another AuditLog would be).
  writeFileSync(lock, JSON.stringify({ pid: process.pid, host: hostname(), token: 'y', ts: new Date().toISOString() }));
  const impatient = openAuditLog(file, { lock: { timeoutMs: 150 } });
  assert.throws(
    () => impatient.append({ type: 'ran' }),
    (e: unknown) => e instanceof AuditError && e.code === 'AUDIT_LOCK_TIMEOUT' && e.message.includes(`process ${process.pid}`),
  );
  // Once the lock is older than staleMs it is broken even though the pid lives (pid reuse).
  const patient = openAuditLog(file, { lock: { timeoutMs: 2000, staleMs: 50 } });
  assert.equal(patient.append({ type: 'ran' }).seq, 3);
  assert.equal(log.verify().ok, true);
});

test('a lock whose pid now belongs to another process (another start time) is broken at once; its live holder\'s is not', async () => {
  const { ownerStamp } = await import('../../src/base/owner.js');
  const { file, log } = logWith(1);
  const lock = join(dirname(file), 'audit.lock');
  const [pid, start] = ownerStamp().split(' ') as [string, string];
  // This process's pid, written by a process that started at another time: that holder is gone.
  writeFileSync(lock, JSON.stringify({ pid: Number(pid), host: hostname(), token: 'z', ts: new Date().toISOString(), owner: `${pid} ${Number(start) - 1}` }));
  assert.equal(log.append({ type: 'ran' }).seq, 2);
  writeFileSync(lock, JSON.stringify({ pid: Number(pid), host: hostname(), token: 'w', ts: new Date().toISOString(), owner: ownerStamp() }));
  assert.throws(() => openAuditLog(file, { lock: { timeoutMs: 150 } }).append({ type: 'ran' }), (e: unknown) => e instanceof AuditError && e.code === 'AUDIT_LOCK_TIMEOUT');
});
