// File names that are not valid UTF-8 (attack): decoded as a string, their bytes become U+FFFD, so
// `g\xff` and a real `g\ufffd` read as one name. The diff reported the valid one twice (the Sandbox
// Result then printed the second as `g\ufffd (#2)`, which promotion created in the real folder) and
// never the other file: an added, modified or deleted file missing from a PROMOTE verdict's diff.
// The host cannot name such a file as it is: the diff stops and says so (fail closed, BLOCK).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { doctor } from '../../src/sandbox/doctor.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import { py, text } from './helpers-ns.js';

test('/out: a name that is not valid UTF-8 beside the valid name it decodes to is never dropped from the diff', async () => {
  const o = await py(['open(b"/out/a\\xff", "w").write("hidden")', 'open("/out/a\\ufffd", "w").write("shown")'].join('\n'));
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.fs.out, null, `the /out diff named only ${JSON.stringify(o.fs.out?.map((c) => c.path))}`);
  assert.match(o.fs.outError ?? '', /not valid UTF-8/);
});

test('a scope: deleting a real file whose name is not valid UTF-8 (and adding its look-alike) is not a diff without the deletion', async (t) => {
  const caps = await doctor();
  if (!(caps.isRoot && caps.overlayfs)) return t.skip('needs the host overlay (root)');
  const scope = mkdtempSync(join('/var/tmp', 'airlock-ns-names-'));
  t.after(() => rmSync(scope, { recursive: true, force: true }));
  chmodSync(scope, 0o777);
  writeFileSync(Buffer.from(`${scope}/g\xff`, 'latin1'), 'precious', { mode: 0o666 });
  mkdirSync(join(scope, 'D'), { mode: 0o777 });
  chmodSync(join(scope, 'D'), 0o777);
  writeFileSync(Buffer.from(`${scope}/D/f\xff`, 'latin1'), 'precious too', { mode: 0o666 });

  const swap = ['import os', `s = ${JSON.stringify(scope)}.encode()`, 'os.unlink(s + b"/g\\xff")', 'open(s + "/g\\ufffd".encode(), "w").write("new")'].join('\n');
  const o = await py(swap, { scopes: [{ hostPath: scope }] });
  assert.equal(o.status, 'SUCCESS', text(o));
  const sc = o.fs.scopes[0];
  assert.equal(sc?.changes, null, `the scope diff was ${JSON.stringify(sc?.changes?.map((c) => `${c.change} ${c.path}`))}`);
  assert.match(sc?.error ?? '', /not valid UTF-8/);

  // A deleted folder's contents are listed through the scope's agent: a name there is refused too.
  const rmTree = ['import shutil', `shutil.rmtree(${JSON.stringify(join(scope, 'D'))})`].join('\n');
  const o2 = await py(rmTree, { scopes: [{ hostPath: scope }] });
  assert.equal(o2.status, 'SUCCESS', text(o2));
  const sc2 = o2.fs.scopes[0];
  assert.equal(sc2?.changes, null, `the scope diff was ${JSON.stringify(sc2?.changes?.map((c) => `${c.change} ${c.path}`))}`);
  assert.match(sc2?.error ?? '', /not valid UTF-8/);
  await sandboxIdle();
  assert.deepEqual(readdirSync(Buffer.from(scope), { encoding: 'buffer' }).map((b) => b.toString('hex')).sort(), [Buffer.from('D').toString('hex'), Buffer.from('g\xff', 'latin1').toString('hex')].sort());
});

test('/dev/shm: a folder whose name is not valid UTF-8, beside its look-alike, is not left out of what the run left there', async () => {
  const code = ['import os', 'os.mkdir(b"/dev/shm/d\\xff")', 'for i in range(3): open(b"/dev/shm/d\\xff/f%d" % i, "wb").write(b"x" * 1000)', 'os.mkdir("/dev/shm/d\\ufffd")'].join('\n');
  const o = await py(code);
  assert.equal(o.status, 'SUCCESS', text(o));
  // Before: 2 entries, 0 bytes (the empty look-alike counted twice), and nothing said incomplete.
  assert.match(o.scratch?.incomplete ?? '', /not valid UTF-8/, JSON.stringify(o.scratch));
});
