// What the host keeps of an observer's raw file-access list (pure logic; the real runs are in
// observe-attacks.test.ts and tracer.test.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { refusedFileAccess } from '../../src/sandbox/observe/file-access.js';
import type { FileAccess } from '../../src/sandbox/observe/types.js';

test('refused file access: writes outside the writable areas and secret reads are kept; what reached nothing, the writable areas and descriptor aliases are not', () => {
  const w = (path: string, syscall: string, result: string | null = 'EROFS'): FileAccess => ({ path, syscall, access: 'write', result });
  const raw: FileAccess[] = [
    w('/etc/hosts', 'fchmod'),
    w('/etc', 'fchmod', 'EBADF'), // fchmod(-100): no such descriptor
    w('/usr', 'mkdir', 'EEXIST'), // mkdir -p of an ancestor
    w('/tmp/x', 'fchmod', 'ok'),
    w('/work/scope/f', 'chmod', 'ok'),
    w('/proc/self/fd/1', 'utimensat', 'ok'),
    w('/etc/hosts/', 'chmod'), // the same file again, spelled with a slash
    { path: '/root/.ssh/id_rsa', syscall: 'openat', access: 'read', result: null },
    { path: '/usr/lib/x', syscall: 'openat', access: 'read', result: null },
  ];
  assert.deepEqual(
    refusedFileAccess(raw, { writable: ['/out', '/tmp', '/dev/shm', '/work/scope'], exposed: [] }).map((a) => [a.syscall, a.path]),
    [['fchmod', '/etc/hosts'], ['openat', '/root/.ssh/id_rsa']],
  );
});
