// Issue 16: what a hostile program leaves behind cannot make the host spend more than the run's own
// limits allow (scratch space outside the caps, file floods, sparse files), and what it leaves in
// /out is never recreated on the host as anything but data. Real bubblewrap, real programs.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { judge } from '../../src/judge/judge.js';
import { DiffBudget, DiffBudgetExceeded, snapshotTree } from '../../src/sandbox/observe/fs-diff.js';
import { freshOut, py, run, text } from './helpers-ns.js';

const root = process.getuid?.() === 0;

test('/dev/shm is capped with /tmp: filling it stops at the /tmp limit, the run is over its limits, and its use is reported', { skip: !root }, async () => {
  const code = [
    'import os',
    'n = 0',
    'try:',
    '  with open("/dev/shm/fill", "wb") as f:',
    '    for _ in range(300): f.write(b"x" * (1 << 20)); n += 1',
    'except OSError as e: print("stopped", e.errno)',
    'for i in range(200): open(f"/dev/shm/f{i}", "w").close()',
    'print("MiB", n)',
  ].join('\n');
  const o = await py(code, { limits: { tmpBytes: 8 << 20 } });
  assert.match(o.stdout.bytes.toString(), /stopped 28/, text(o)); // ENOSPC
  assert.ok(Number(/MiB (\d+)/.exec(o.stdout.bytes.toString())?.[1]) <= 8, 'no more than the /tmp cap went in');
  assert.ok(o.limitsExceeded.includes('tmpBytes'), JSON.stringify(o.limitsExceeded));
  assert.ok(o.scratch && o.scratch.shmFiles >= 200 && o.scratch.shmBytes <= 8 << 20, JSON.stringify(o.scratch));
  const j = judge(action(), o);
  assert.equal(j.verdict, 'BLOCK');
  assert.ok(j.unexpected.some((u) => /in \/dev\/shm/.test(u)), j.unexpected.join('\n'));
});

test('/dev is read-only: nothing can be created beside the devices', { skip: !root }, async () => {
  const o = await run(['/bin/sh', '-c', 'echo x > /dev/planted && echo WROTE; echo ok > /dev/null && echo NULL-OK']);
  assert.doesNotMatch(o.stdout.bytes.toString(), /WROTE/, text(o));
  assert.match(o.stdout.bytes.toString(), /NULL-OK/, 'the devices still work');
});

test('a flood of files in /out stops at the run\'s file cap (nr_inodes), and the run is BLOCKed as over its limits', { skip: !root, timeout: 120_000 }, async () => {
  // Four times the cap: every open stops at the host tracer, ~0.25 ms each on a slow 2-core VM, so
  // 200,000 tries (bench:host-cost's flood) took 55 s of the 60 s limit alone and ran out under the suite's load.
  const o = await py('import os\nmade = 0\nfor i in range(20000):\n  try: open(f"/out/f{i}", "w").close(); made += 1\n  except OSError: pass\nprint(made)', { limits: { files: 5000, wallMs: 60_000, cpuMs: 60_000 } });
  const made = Number(o.stdout.bytes.toString().trim());
  assert.ok(made > 0 && made <= 5000, `${made} files were made: ${text(o)}`);
  assert.ok(o.limitsExceeded.includes('files'), JSON.stringify(o.limitsExceeded));
  assert.equal(judge(action(), o).verdict, 'BLOCK');
});

test('the host diff stops at the file cap even where no tmpfs enforces it (a plain folder)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-budget-'));
  mkdirSync(join(dir, 'a'));
  for (let i = 0; i < 300; i++) writeFileSync(join(dir, 'a', `f${i}`), '');
  await assert.rejects(snapshotTree(dir, new DiffBudget({ files: 100, bytes: 1 << 20, deadline: Date.now() + 60_000 })), (e: unknown) => e instanceof DiffBudgetExceeded && e.limit === 'files' && /more than 100 files/.test(e.message));
  await assert.rejects(snapshotTree(dir, new DiffBudget({ files: 1000, bytes: 1 << 20, deadline: Date.now() - 1 })), (e: unknown) => e instanceof DiffBudgetExceeded && e.limit === 'time');
  const ok = await snapshotTree(dir, new DiffBudget({ files: 1000, bytes: 1 << 20, deadline: Date.now() + 60_000 }));
  assert.equal(ok.entries.size, 301);
});

test('a 1 TiB sparse file in /out is never read, hashed or copied: over the disk cap by its apparent size, BLOCK', { skip: !root, timeout: 60_000 }, async () => {
  const outDir = freshOut();
  const o = await run(['/bin/sh', '-c', 'truncate -s 1T /out/huge && echo small > /out/small && ls -ls /out'], { outDir });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.ok(o.limitsExceeded.includes('outBytes'), JSON.stringify(o.limitsExceeded));
  assert.equal(o.fs.out, null);
  assert.match(o.fs.outError ?? '', /apparent size/);
  assert.equal(existsSync(outDir), false, 'nothing of /out was copied to the host: no folder was made for it');
  assert.equal(judge(action(), o).verdict, 'BLOCK');
});

/** A minimal Action for the judge: writes to /out allowed, nothing else declared. */
function action() {
  return {
    id: 'host-cost',
    source: 'tool-request' as const,
  kind: 'TEST',
  preconditions: { pathsExist: [], networkAvailable: false, userIdle: false },
  cooldownOnRepeat: false,
    lane: 'ns' as const,
    run: { kind: 'argv' as const, argv: ['x'] },
    inputs: [],
    outputsExpected: [],
    scope: { paths: [], recursive: false },
    effects: { create: ['/out/**'], modify: [], delete: [], network: false, systemStateChange: false },
    limits: { wallMs: 1000, cpuMs: 1000, memoryBytes: 1 << 26, diskBytes: 1 << 20, files: 5000, pids: 8, stdoutBytes: 1024, stderrBytes: 1024 },
    network: { mode: 'none' as const, allowlist: [] },
    risk: 'LOW' as const,
    confirmationRequired: false,
    rollbackSupported: true,
    sandboxRequired: true,
    display: 'x',
  };
}
