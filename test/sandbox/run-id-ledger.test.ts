// Each sandbox uid is handed out once until a rescan (src/sandbox/run-id-ledger.ts,
// src/sandbox/run-id-rescan.ts): the ledger across processes, the lock, the rescan's walk and what it
// reads in /proc, and the attack it exists for: an escaped run leaves a set-uid file of its uid on the
// host, and no later sandbox may be given that uid.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, lchownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { claimRunIds, hostRunIds, RUN_ID_RANGE, type RunIds, type RunIdPool } from '../../src/sandbox/run-ids.js';
import { keyLeftovers, mountsToWalk, processLeftovers, rescanRunIds, sysvLeftovers } from '../../src/sandbox/run-id-rescan.js';
import { readLedger, RUN_ID_LEDGER } from '../../src/sandbox/run-id-ledger.js';
import { run, text } from './helpers-ns.js';
import { airlock, airlockAsNobody } from '../helpers/cli.js';
import { as, liveRuns } from './helpers-run-ids.js';

const isRoot = process.getuid?.() === 0;

function tempPool(first: number, count: number): RunIdPool & { root: string } {
  const root = mkdtempSync(join(tmpdir(), 'airlock-ledger-'));
  const pool = { range: { first, count }, dir: join(root, 'claims'), ledger: join(root, 'ledger'), root };
  mkdirSync(pool.dir);
  mkdirSync(pool.ledger, { mode: 0o700 });
  return pool;
}
const sleepMs = (ms: number): void => void Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
const runIdsModule = new URL('../../src/sandbox/run-ids.js', import.meta.url).href;

/** Another process claims `n` ids from the pool, letting each go at once; resolves with them (a refusal: its code, in their place). */
function claimInChild(pool: RunIdPool, n: number): Promise<(number | string)[]> {
  const script = `const { claimRunIds } = await import(${JSON.stringify(runIdsModule)}); const p = JSON.parse(process.argv[1]); const ids = [];
    for (let i = 0; i < ${n}; i++) { const r = claimRunIds(p); if (r.code) { ids.push(r.code); continue; } ids.push(r.uid); r.release(); }
    process.stdout.write(JSON.stringify(ids));`;
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ['--input-type=module', '-e', script, JSON.stringify(pool)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    c.stdout.on('data', (b: Buffer) => (out += b));
    // 'close', not 'exit': the exit can be told before the last of its output is read.
    c.on('close', (code) => (code === 0 ? resolve(JSON.parse(out) as number[]) : reject(new Error(`claimer exited ${code}`))));
  });
}

const claim = (p: RunIdPool): RunIds => {
  const r = claimRunIds(p);
  assert.ok(!('code' in r), JSON.stringify(r));
  return r;
};

test('two processes claiming at once from one ledger never get the same id, and nothing is handed out twice', async (t) => {
  const pool = tempPool(2_048_100_000, 1000);
  t.after(() => rmSync(pool.root, { recursive: true, force: true }));
  // Each claims 300 ids (blocks of 62, a 16th of the range, reserved under the ledger's lock), releasing each at once.
  const [a, b] = await Promise.all([claimInChild(pool, 300), claimInChild(pool, 300)]);
  const all = [...a!, ...b!];
  assert.equal(new Set(all).size, 600, 'an id was handed out twice');
  assert.ok(all.every((id) => typeof id === 'number' && id >= pool.range.first && id < pool.range.first + 1000), JSON.stringify(all.filter((id) => typeof id !== 'number')));
  const st = readLedger(pool.ledger);
  assert.ok(!('code' in st) && st.next >= 600 && st.next <= 600 + 2 * 62, `the ledger counts what was reserved: ${JSON.stringify(st)}`);
});

test('a lock left by a dead process is taken over; a rescan marked by a dead process is cleared and its epoch goes on', () => {
  const pool = tempPool(2_048_200_000, 100);
  symlinkSync(`${process.pid.toString(36)}.1`, join(pool.ledger, 'lock')); // our pid, another start time: dead
  writeFileSync(join(pool.ledger, 'state'), '4 10 rescan\n');
  const a = claim(pool);
  assert.equal(a.uid, pool.range.first + 10);
  assert.equal(readFileSync(join(pool.ledger, 'state'), 'utf8'), '4 16\n', 'one block (a 16th of this small range) reserved after the dead rescan\'s mark');
  rmSync(pool.root, { recursive: true, force: true });
});

test('while a rescan walks, a claim is refused at once (NS_RUN_IDS_LOCKED); afterwards the new epoch skips what it found and what live runs held', { skip: !isRoot && 'chown needs root' }, async (t) => {
  const pool = tempPool(2_048_300_000, 10);
  t.after(() => rmSync(pool.root, { recursive: true, force: true }));
  const f = pool.range.first;
  const a = claim(pool);
  const b = claim(pool); // held through the rescan
  a.release();
  const scanned = join(pool.root, 'host');
  mkdirSync(join(scanned, 'deep', 'er'), { recursive: true });
  const planted = join(scanned, 'deep', 'er', 'left');
  writeFileSync(planted, 'x');
  chownSync(planted, f + 4, 0);
  const link = join(scanned, 'link');
  symlinkSync('/etc/passwd', link);
  lchownSync(link, 0, f + 5); // a link's own group counts; the link is not followed
  // While the walk goes on, another process asks for an id: it is refused at once (a service's event loop never waits on a walk).
  let during: unknown;
  let claimer: Promise<(number | string)[]> | undefined;
  const r = rescanRunIds(pool, {
    roots: [scanned],
    progress: () => {
      if (claimer) return;
      during = readLedger(pool.ledger);
      claimer = claimInChild(pool, 1);
      sleepMs(1000); // the child starts and asks while the walk holds the lock
    },
  });
  assert.ok(!('code' in r), JSON.stringify(r));
  assert.deepEqual(during, { epoch: 1, next: 2, rescanning: true }, 'the ledger says a rescan is under way while it walks');
  assert.deepEqual(r.found.map((x) => [x.id, x.what]).sort(), [[f + 4, planted], [f + 5, link]]);
  assert.deepEqual(r.held, [b.uid]);
  assert.deepEqual(r.tainted, [f + 1, f + 4, f + 5]);
  assert.equal(r.epoch, 2);
  assert.deepEqual(await claimer, ['NS_RUN_IDS_LOCKED'], 'the claim made during the walk was refused, not handed the old epoch\'s next id (f + 2)');
  const next = [claim(pool), claim(pool), claim(pool), claim(pool)].map((x) => x.uid);
  assert.deepEqual(next, [f, f + 2, f + 3, f + 6], 'the new epoch hands out the clean ids, in order, skipping the found and the held');
  b.release();
});

test('a rescan that cannot read everything starts no new epoch', { skip: !isRoot && 'root reads every folder; as another user this tests nothing' }, (t) => {
  const pool = tempPool(2_048_400_000, 3);
  t.after(() => rmSync(pool.root, { recursive: true, force: true }));
  claim(pool);
  const r = rescanRunIds(pool, { roots: [join(pool.root, 'no-such-folder')] });
  assert.ok('code' in r && r.code === 'RESCAN_INCOMPLETE' && r.message.includes('no-such-folder'), JSON.stringify(r));
  assert.deepEqual(readLedger(pool.ledger), { epoch: 1, next: 1, rescanning: false }, 'the epoch goes on, unmarked');
});

test('attack: a folder swapped for a link, or for another folder, while the rescan walks stops it (RESCAN_INCOMPLETE) instead of leading it elsewhere', async () => {
  const fs = (await import('node:fs')).default;
  const { syncBuiltinESMExports } = await import('node:module');
  for (const swap of ['link', 'folder'] as const) {
    const pool = tempPool(2_048_600_000, 3);
    const host = join(pool.root, 'host');
    mkdirSync(join(host, 'a'), { recursive: true });
    mkdirSync(join(pool.root, 'empty'));
    writeFileSync(join(host, 'a', 'planted'), 'x');
    const real = fs.lstatSync;
    const patchable = fs as { lstatSync: unknown };
    // Between the walk's lstat of host/a and its open: another process puts a link (to an empty folder) or another folder there.
    patchable.lstatSync = (p: string, ...rest: unknown[]) => {
      const st = (real as (...a: unknown[]) => unknown)(p, ...rest);
      if (typeof p === 'string' && p.endsWith('/a') && real(join(host, 'a'), { throwIfNoEntry: false })?.isDirectory()) {
        fs.renameSync(join(host, 'a'), join(pool.root, 'hidden'));
        if (swap === 'link') fs.symlinkSync(join(pool.root, 'empty'), join(host, 'a'));
        else fs.renameSync(join(pool.root, 'empty'), join(host, 'a'));
      }
      return st;
    };
    syncBuiltinESMExports();
    let r;
    try {
      r = rescanRunIds(pool, { roots: [host] });
    } finally {
      patchable.lstatSync = real;
      syncBuiltinESMExports();
    }
    assert.ok('code' in r && r.code === 'RESCAN_INCOMPLETE' && r.message.includes(join(host, 'a')), `${swap}: ${JSON.stringify(r)}`);
    assert.deepEqual(readLedger(pool.ledger), { epoch: 1, next: 0, rescanning: false }, 'no new epoch');
    rmSync(pool.root, { recursive: true, force: true });
  }
});

test('the places the rescan reads: mounts (one per file system), System V IPC, keyrings, processes', () => {
  const info = [
    '22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw',
    '23 22 254:0 /srv/x /mnt/x rw - ext4 /dev/vda rw', // part of a file system walked whole
    '24 22 0:21 / /proc rw - proc proc rw',
    '25 22 0:27 / /dev/shm rw - tmpfs tmpfs rw',
    '27 25 0:28 / /dev/shm rw - tmpfs tmpfs rw', // mounted over: the walk of /dev/shm sees this one
    '26 22 0:40 /sub /mnt/only\\040part rw - ext4 /dev/vdb rw', // only a part is mounted: walked
  ].join('\n');
  assert.deepEqual(mountsToWalk(info), ['/', '/dev/shm', '/mnt/only part']);
  const R = { first: 2_048_000_000, count: 10 };
  const shm = '       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n' +
    '         0          7   600                  4096  1234  1234      0 2048000003 2048000003 2048000003 2048000003 0 0 0 4096 0\n' +
    '         0          8   600                  4096  1234  1234      0     0     0     0     0 0 0 0 4096 0\n';
  assert.deepEqual(sysvLeftovers(R, 'shm', shm), [{ id: 2_048_000_003, what: 'System V shm 7' }]);
  assert.deepEqual(keyLeftovers(R, '    0:    10 9/9 5/1000000 98/25000000\n2048000009:     1 1/1 1/200 9/20000\n'), [{ id: 2_048_000_009, what: "keys in the kernel's keyrings (/proc/key-users)" }]);
});

test('the rescan finds a real IPC object and a real process of a sandbox uid', { skip: !isRoot && 'running as another uid needs root' }, async (t) => {
  const uid = 2_048_500_007;
  const R = { first: 2_048_500_000, count: 10 };
  const made = spawnSync('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', 'ipcmk', '-M', '4096'], { encoding: 'utf8' });
  const shmid = /(\d+)/.exec(made.stdout)?.[1];
  assert.ok(made.status === 0 && shmid, made.stderr);
  t.after(() => void spawnSync('ipcrm', ['-m', shmid!]));
  assert.deepEqual(sysvLeftovers(R, 'shm', readFileSync('/proc/sysvipc/shm', 'utf8')), [{ id: uid, what: `System V shm ${shmid}` }]);
  const sleeper = spawn('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', 'sleep', '30'], { stdio: 'ignore' });
  t.after(() => void sleeper.kill('SIGKILL'));
  for (let i = 0; i < 200 && processLeftovers(R).length === 0; i++) await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(processLeftovers(R).map((x) => x.id), [uid]);
});

test('attack: an escaped run leaves a set-uid copy of a shell in /dev/shm; no later sandbox gets its uid, and the rescan finds it and keeps the uid out', { skip: !isRoot && 'per-run uids are root\'s' }, async (t) => {
  const host = hostRunIds();
  assert.ok(!('off' in host), JSON.stringify(host));
  assert.equal(host.ledger, RUN_ID_LEDGER);
  const o = run(['/bin/sh', '-c', 'echo P > /out/marker; exec sleep 2'], { limits: { wallMs: 15_000 } });
  const a = (await liveRuns(['P']))[0]!;
  const planted = `/dev/shm/airlock-ledger-test-${a.uid}`;
  t.after(() => rmSync(planted, { force: true }));
  // What an escape from the run's namespaces can do: leave a file of its uid where every user may write.
  as(a, `const fs = require('node:fs'); fs.copyFileSync('/bin/sh', ${JSON.stringify(planted)}); fs.chmodSync(${JSON.stringify(planted)}, 0o4755);`);
  assert.equal(statSync(planted).uid, a.uid);
  assert.equal((await o).status, 'SUCCESS');
  // The next sandboxes: none is given the uid (the ledger hands each id out once per epoch).
  const later = [];
  for (let i = 0; i < 3; i++) {
    const r = await run(['/bin/true']);
    assert.equal(r.status, 'SUCCESS', text(r));
    later.push(r.host.hostUid);
  }
  assert.ok(later.every((u) => u !== a.uid && u >= RUN_ID_RANGE.first && u < RUN_ID_RANGE.first + RUN_ID_RANGE.count), JSON.stringify({ planted: a.uid, later }));
  const st = readLedger(host.ledger);
  assert.ok(!('code' in st) && st.next > a.uid - RUN_ID_RANGE.first, `the ledger has the uid as handed out: ${JSON.stringify(st)}`);
  // The rescan of that uid's part of the range (a ledger of its own: the host's epoch is left as it is) finds the file.
  const pool = tempPool(a.uid - 1, 3);
  t.after(() => rmSync(pool.root, { recursive: true, force: true }));
  const r = rescanRunIds(pool, { roots: ['/dev/shm'] });
  assert.ok(!('code' in r), JSON.stringify(r));
  assert.deepEqual(r.found.filter((f) => f.what === planted).map((f) => f.id), [a.uid], JSON.stringify(r.found));
  assert.ok(r.tainted.includes(a.uid));
  // The new epoch hands out the range's other ids (but those of live processes: a sandbox waiting for its run), never that uid.
  const next: number[] = [];
  for (let c = claimRunIds(pool); !('code' in c); c = claimRunIds(pool)) next.push(c.uid);
  assert.deepEqual(next, [a.uid - 1, a.uid, a.uid + 1].filter((id) => !r.tainted.includes(id)), JSON.stringify(r));
  assert.ok(!next.includes(a.uid));
  chmodSync(planted, 0o644);
});

test('setup --rescan-run-ids is refused for a user who is not root (SETUP_RESCAN_NOT_ROOT, exit 2)', { skip: !isRoot && 'needs root (runs it as nobody)' }, () => {
  const r = airlockAsNobody(['setup', '--rescan-run-ids']);
  assert.equal(r.code, 2, r.stdout + r.stderr);
  assert.match(r.stderr, /SETUP_RESCAN_NOT_ROOT: the rescan reads every file system of the host/);
});

test('doctor\'s "run uids" line says how many of the range are handed out, from the ledger on disk', { skip: !isRoot && 'per-run uids are root\'s' }, () => {
  const host = hostRunIds();
  assert.ok(!('off' in host));
  const before = readLedger(host.ledger);
  assert.ok(!('code' in before));
  const out = airlock(['doctor']).stdout;
  const m = /run uids[^\n]*\n\s+(\d+) left: (\d+) of (\d+) handed out, each to one sandbox, since the last rescan \(epoch (\d+), ([^)]+)\)/.exec(out);
  assert.ok(m, out);
  const after = readLedger(host.ledger);
  assert.ok(!('code' in after));
  // Other test files' runs may reserve ids meanwhile: the line's count lies between the two readings.
  const given = Number(m[2]);
  assert.ok(given >= before.next && given <= after.next && Number(m[1]) === RUN_ID_RANGE.count - given && Number(m[3]) === RUN_ID_RANGE.count, m[0]);
  assert.equal(m[5], RUN_ID_LEDGER);
});
