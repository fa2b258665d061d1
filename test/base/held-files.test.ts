// Pseudo-files held open and read again from offset 0: what they read is what a fresh read gives,
// a /proc/<pid> file stays bound to its process, and nothing is left open or created.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { HeldFiles } from '../../src/base/held-files.js';

const openFiles = (): string[] => readdirSync('/proc/self/fd').flatMap((fd) => {
  try {
    return [readlinkSync(`/proc/self/fd/${fd}`)];
  } catch {
    return [];
  }
});
const utimeTicks = (stat: string): number => Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[11]);

test('a held /proc file reads fresh content each time, as a new open would', () => {
  const h = new HeldFiles();
  try {
    const before = utimeTicks(h.read('/proc/self/stat')!);
    for (const end = Date.now() + 120; Date.now() < end; );
    const after = utimeTicks(h.read('/proc/self/stat')!);
    assert.ok(after > before, `user ticks grew: ${before} -> ${after}`);
    assert.ok(Math.abs(utimeTicks(readFileSync('/proc/self/stat', 'utf8')) - after) <= 1);
    assert.equal(openFiles().filter((f) => f.endsWith('/stat')).length, 1, 'one descriptor, reused');
  } finally {
    h.close();
  }
});

test('a file larger than the first buffer is read whole, and read again whole after it changed', () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-held-'));
  const h = new HeldFiles();
  try {
    const f = join(dir, 'big');
    const big = 'x'.repeat(300_000) + 'end';
    writeFileSync(f, big);
    assert.equal(h.read(f), big);
    writeFileSync(f, 'short');
    assert.equal(h.read(f), 'short');
  } finally {
    h.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a held /proc/<pid> file stays bound to its process: once it is gone, reads and writes fail instead of reaching another's", async () => {
  const child = spawn('/bin/sleep', ['30']);
  const pid = child.pid!;
  const h = new HeldFiles();
  try {
    assert.match(h.read(`/proc/${pid}/status`) ?? '', /^Name:\s+sleep$/m);
    assert.equal(h.write(`/proc/${pid}/clear_refs`, '5'), true, 'the peak reset of a live process');
    child.kill('SIGKILL');
    await new Promise((r) => child.on('exit', r));
    for (let i = 0; i < 50 && existsSync(`/proc/${pid}`); i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(h.read(`/proc/${pid}/status`), null);
    assert.equal(h.write(`/proc/${pid}/clear_refs`, '5'), false);
  } finally {
    h.close();
  }
});

/** A new process given `pid` (root: the kernel's next pid set through ns_last_pid; retried while other forks take it first). */
async function processWithPid(pid: number): Promise<ReturnType<typeof spawn> | null> {
  for (let i = 0; i < 100; i++) {
    writeFileSync('/proc/sys/kernel/ns_last_pid', String(pid - 1));
    const c = spawn('/bin/cat', [], { stdio: ['pipe', 'ignore', 'ignore'] });
    if (c.pid === pid) return c;
    c.kill('SIGKILL');
    await new Promise((r) => c.on('exit', r));
  }
  return null;
}

test("a worker's pid taken by another process: read by path, /proc gives the newcomer; through the held file, nothing", { skip: process.getuid?.() !== 0 && 'needs root (ns_last_pid)' }, async () => {
  const worker = spawn('/bin/sleep', ['30']);
  const pid = worker.pid!;
  const h = new HeldFiles();
  try {
    // Both opened while the worker is known to be ours (as a Monty worker's are, at its first run).
    assert.match(h.read(`/proc/${pid}/status`) ?? '', /^Name:\s+sleep$/m);
    assert.equal(h.write(`/proc/${pid}/clear_refs`, '5'), true);
    worker.kill('SIGKILL');
    await new Promise((r) => worker.on('exit', r));
    const newcomer = await processWithPid(pid);
    assert.ok(newcomer, `no process could be given pid ${pid}`);
    try {
      assert.match(readFileSync(`/proc/${pid}/status`, 'utf8'), /^Name:\s+cat$/m, 'the pid is reused: a read by path reaches the newcomer');
      assert.equal(h.read(`/proc/${pid}/status`), null, 'the held file does not');
      assert.equal(h.write(`/proc/${pid}/clear_refs`, '5'), false, 'nor does a reset');
    } finally {
      newcomer.kill('SIGKILL');
    }
  } finally {
    h.close();
  }
});

test('a write never creates a file; after close, nothing is open and nothing opens', () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-held-'));
  const h = new HeldFiles();
  try {
    assert.equal(h.write(join(dir, 'absent'), '1'), false);
    assert.deepEqual(readdirSync(dir), []);
    writeFileSync(join(dir, 'f'), 'v');
    assert.equal(h.read(join(dir, 'f')), 'v');
    assert.ok(openFiles().some((f) => f === join(dir, 'f')));
    h.close();
    assert.ok(!openFiles().some((f) => f.startsWith(dir)), 'closed');
    assert.equal(h.read(join(dir, 'f')), null);
    assert.ok(!openFiles().some((f) => f.startsWith(dir)), 'not opened again');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
