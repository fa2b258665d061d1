// Second review of the idmapped scope overlays (a scope writer's uid of its own, native/idmap.c):
// what a run leaves behind when the idmapped overlay half-happened, and which pooled sandboxes a
// refusal drops. Root only (per-run ids are root's). Each test uses scope paths of its own: a
// refusal is remembered by path for the rest of the process.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { nativeBinaryPath } from '../../src/base/native.js';
import { idmapOps } from '../../src/sandbox/ns/hostops.js';
import { closeSandboxPool, configureSandboxPool, sandboxPoolState } from '../../src/sandbox/ns/pool.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import { stagingBase } from '../../src/sandbox/ns/staging.js';
import { mountsBelow } from '../../src/sandbox/ns/sweep.js';
import { syscallTracer } from '../../src/sandbox/observe/tracer.js';
import { RUN_ID_CLAIMS } from '../../src/sandbox/run-ids.js';
import { run, text, until } from './helpers-ns.js';
import { dedicatedSandboxUser } from '../helpers/sandbox-user.js';

const root = process.getuid?.() === 0;
const noIdmap = !root ? 'root only' : nativeBinaryPath('airlock-idmap') === null ? 'airlock-idmap is not built' : false;
const noPool = noIdmap || (syscallTracer() === null ? 'needs the host tracer' : nativeBinaryPath('airlock-exec') === null ? 'airlock-exec is not built' : false);

after(async () => {
  await closeSandboxPool();
  await sandboxIdle();
});

/** A folder of the sandbox user's with one file of its own (0600: only its owner may read it). */
function sandboxUserScope(prefix: string): string {
  const u = dedicatedSandboxUser();
  const d = mkdtempSync(join('/var/tmp', prefix));
  chownSync(d, u.uid, u.gid);
  chmodSync(d, 0o755);
  writeFileSync(join(d, 'theirs.txt'), 'x\n', { mode: 0o600 });
  chownSync(join(d, 'theirs.txt'), u.uid, u.gid);
  return d;
}

test('failure injection: the idmap helper dies after its overlay mount and before its answer: the run falls back, and that overlay is unmounted before its uid goes back', { skip: noIdmap }, async (t) => {
  const scope = sandboxUserScope('airlock-idmap-r2-died-');
  t.after(() => rmSync(scope, { recursive: true, force: true }));
  const helper = idmapOps()!;
  const real = helper.mountIdmappedOverlay.bind(helper);
  let firstUid: number | null = null;
  // What HostOps says when the helper's pipe closes with the request in flight (SIGKILL, OOM killer):
  // the mount(2) may well have been done by then.
  helper.mountIdmappedOverlay = async (lower, upper, work, merged, readOnly, from, to) => {
    const err = await real(lower, upper, work, merged, readOnly, from, to);
    if (firstUid !== null || err !== null) return err;
    firstUid = to;
    return 'the host helper stopped (exit null)';
  };
  t.after(() => {
    helper.mountIdmappedOverlay = real;
  });
  const o = await run(['/bin/sh', '-c', `echo y >> ${scope}/theirs.txt`], { scopes: [{ hostPath: scope }] });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.ok(firstUid !== null, 'the first attempt asked for an idmapped overlay');
  assert.equal(o.host.hostIds, 'own-gid', 'the stopped helper refused the first attempt: run again with the sandbox user\'s uid');
  await sandboxIdle();
  const base = await stagingBase();
  const left = mountsBelow(base).filter((m) => m !== base);
  const claimed = readdirSync(RUN_ID_CLAIMS).includes(String(firstUid));
  // A uid given back while the overlay showing the scope's files as that uid's is still mounted would be the next holder's.
  assert.deepEqual({ left, claimed }, { left: [], claimed: false }, 'an overlay over the idmapped clone of the scope is left mounted');
});

test('a run refused after one scope\'s idmapped overlay was mounted (another scope cannot be idmapped): that overlay is unmounted and the uid goes back', { skip: noIdmap }, async (t) => {
  const good = sandboxUserScope('airlock-idmap-r2-good-');
  const bad = mkdtempSync(join('/var/tmp', 'airlock-idmap-r2-ramfs-'));
  assert.equal(spawnSync('mount', ['-t', 'ramfs', '-o', 'mode=0777', 'none', bad]).status, 0);
  t.after(() => {
    spawnSync('umount', [bad]);
    rmSync(bad, { recursive: true, force: true });
    rmSync(good, { recursive: true, force: true });
  });
  const helper = idmapOps()!;
  const real = helper.mountIdmappedOverlay.bind(helper);
  const asked = new Set<number>();
  helper.mountIdmappedOverlay = (lower, upper, work, merged, readOnly, from, to) => {
    asked.add(to);
    return real(lower, upper, work, merged, readOnly, from, to);
  };
  t.after(() => {
    helper.mountIdmappedOverlay = real;
  });
  const o = await run(['/bin/sh', '-c', `echo y >> ${good}/theirs.txt; echo z > ${bad}/new.txt`], { scopes: [{ hostPath: good }, { hostPath: bad }] });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.host.hostIds, 'own-gid');
  assert.equal(asked.size, 1, 'one uid of the first attempt asked for both overlays');
  await sandboxIdle();
  const base = await stagingBase();
  assert.deepEqual(mountsBelow(base).filter((m) => m !== base), [], 'the good scope\'s idmapped overlay is left mounted');
  for (const uid of asked) assert.ok(!readdirSync(RUN_ID_CLAIMS).includes(String(uid)), `the first attempt's uid ${uid} is still claimed`);
});

test('a refusal on a scope a writer shape only reads drops that shape\'s waiting sandbox too (its runs fall back and never take it)', { skip: noPool }, async (t) => {
  const written = mkdtempSync(join('/var/tmp', 'airlock-idmap-r2-rw-'));
  const readOnly = mkdtempSync(join('/var/tmp', 'airlock-idmap-r2-ro-'));
  for (const d of [written, readOnly]) chmodSync(d, 0o777);
  t.after(() => {
    spawnSync('umount', [readOnly]);
    rmSync(readOnly, { recursive: true, force: true });
    rmSync(written, { recursive: true, force: true });
  });
  await sandboxIdle();
  await closeSandboxPool();
  configureSandboxPool(1);
  t.after(() => closeSandboxPool());
  const shape = [{ hostPath: written }, { hostPath: readOnly, readOnly: true }];
  const warmRun = await run(['/bin/true'], { scopes: shape });
  assert.equal(warmRun.host.hostIds, 'own', text(warmRun));
  await sandboxIdle();
  await until('a sandbox waiting', () => sandboxPoolState().waiting === 1, sandboxPoolState);
  // The read-only scope's path becomes a filesystem without idmapped mounts (ramfs, as NFS or FUSE),
  // and another run, of another shape, writes it: refused, remembered for that path.
  assert.equal(spawnSync('mount', ['-t', 'ramfs', '-o', 'mode=0777', 'none', readOnly]).status, 0);
  const other = await run(['/bin/sh', '-c', `echo z > ${readOnly}/new.txt`], { scopes: [{ hostPath: readOnly }] });
  assert.equal(other.status, 'SUCCESS', text(other));
  assert.equal(other.host.hostIds, 'own-gid', text(other));
  await sandboxIdle();
  // The first shape's runs now fall back (its read-only scope cannot be idmapped) and start their own.
  const again = await run(['/bin/true'], { scopes: shape });
  assert.equal(again.host.hostIds, 'own-gid', text(again));
  assert.equal(again.host.sandboxStart, 'on request', text(again));
  await sandboxIdle();
  assert.equal(sandboxPoolState().waiting, 0, 'a sandbox (its uid, tmpfs, cgroup and bwrap) waits for a shape no run will take');
});
