// A sandboxed program sets overlayfs's own xattr name in the user namespace on a scope folder: the
// host must read overlayfs's marks only where overlayfs writes them (trusted.*, root's overlay).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { doctor } from '../../src/sandbox/doctor.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import { py, text } from './helpers-ns.js';

test('a program\'s own user.overlay.opaque xattr on a scope folder does not make the host report deletions that never happened', async (t) => {
  const caps = await doctor();
  if (!(caps.isRoot && caps.overlayfs)) return t.skip('needs the host overlay (root)');
  const scope = mkdtempSync(join('/var/tmp', 'airlock-ns-opq-'));
  t.after(() => rmSync(scope, { recursive: true, force: true }));
  chmodSync(scope, 0o755);
  mkdirSync(join(scope, 'd'), { mode: 0o777 });
  chmodSync(join(scope, 'd'), 0o777);
  writeFileSync(join(scope, 'd', 'keep.txt'), 'keep', { mode: 0o644 });
  // A folder the sandbox's user may not change: it cannot delete what is in it.
  mkdirSync(join(scope, 'd', 'locked'), { mode: 0o755 });
  writeFileSync(join(scope, 'd', 'locked', 'precious.txt'), 'precious', { mode: 0o644 });
  const code = [
    'import os',
    `d = ${JSON.stringify(join(scope, 'd'))}`,
    'try:',
    '  os.remove(d + "/locked/precious.txt"); print("DELETED")',
    'except OSError as e: print("cannot delete", e.errno)',
    'os.setxattr(d, "user.overlay.opaque", b"y")',
    'print(sorted(os.listdir(d)), sorted(os.listdir(d + "/locked")))',
  ].join('\n');
  const o = await py(code, { scopes: [{ hostPath: scope }] });
  assert.equal(o.status, 'SUCCESS', text(o));
  // What the program saw: nothing was deleted (and it could not delete precious.txt).
  assert.equal(o.stdout.bytes.toString(), "cannot delete 13\n['keep.txt', 'locked'] ['precious.txt']\n", text(o));
  const changes = (o.fs.scopes[0]?.changes ?? []).map((c) => `${c.change} ${c.path.slice(scope.length)}`);
  // The xattr itself is a change of /d's metadata at most; never a deletion of what it holds.
  assert.deepEqual(changes.filter((c) => c.startsWith('deleted')), [], `deletions reported: ${JSON.stringify(changes)}`);
  await sandboxIdle();
  assert.ok(existsSync(join(scope, 'd', 'locked', 'precious.txt')));
});
