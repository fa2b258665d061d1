// The head start for the sandbox's cgroup move (src/sandbox/cgroup/prime.ts): a no-op move of our
// own process, in a group it already is in, and never anything else.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { doctor } from '../../src/sandbox/doctor.js';
import { favorsDynmods, ownProcsFile, primeAttach } from '../../src/sandbox/cgroup/prime.js';
import type { CgroupInfo } from '../../src/sandbox/cgroup/index.js';

const v1: CgroupInfo = {
  version: 1,
  controllers: ['memory', 'pids', 'cpuacct', 'freezer'],
  mounts: { memory: '/sys/fs/cgroup/memory', pids: '/sys/fs/cgroup/pids', cpuacct: '/sys/fs/cgroup/cpu,cpuacct', freezer: '/sys/fs/cgroup/freezer' },
  swapAccounting: false,
  usable: true,
  bases: {},
  delegation: { kind: 'root' },
  detail: '',
};
const v2: CgroupInfo = { version: 2, controllers: ['memory', 'pids', 'cpu'], mounts: { unified: '/sys/fs/cgroup' }, swapAccounting: true, usable: true, bases: {}, delegation: { kind: 'root' }, detail: '' };

test('favordynmods on any cgroup mount turns the head start off', () => {
  const plain = '35 25 0:30 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory\n37 25 0:32 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw';
  assert.equal(favorsDynmods(plain), false);
  assert.equal(favorsDynmods('37 25 0:32 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate,favordynmods'), true);
  assert.equal(favorsDynmods('35 25 0:30 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids,favordynmods'), true);
  // Not a cgroup mount, or the word elsewhere on the line: no.
  assert.equal(favorsDynmods('40 25 0:40 / /mnt/favordynmods rw - tmpfs tmpfs rw,favordynmods'), false);
  assert.equal(favorsDynmods('40 25 0:40 / /favordynmods rw - cgroup cgroup rw,memory'), false);
});

test('the file is our own group in a hierarchy the runs use, a root group first', () => {
  const self = ['12:devices:/x', '4:memory:/service/a', '8:pids:/', '2:cpu,cpuacct:/service/b', '0::/service/c'].join('\n');
  assert.equal(ownProcsFile(v1, self), '/sys/fs/cgroup/pids/cgroup.procs');
  // No root group among the used hierarchies: the first group found (never a hierarchy the runs do not use).
  assert.equal(ownProcsFile(v1, ['12:devices:/', '4:memory:/service/a', '2:cpu,cpuacct:/service/b'].join('\n')), '/sys/fs/cgroup/memory/service/a/cgroup.procs');
  assert.equal(ownProcsFile(v1, '12:devices:/'), null);
  // Outside our cgroup namespace or removed: skipped.
  assert.equal(ownProcsFile(v1, '4:memory:/../../x\n8:pids:/gone (deleted)'), null);
  assert.equal(ownProcsFile(v2, self), '/sys/fs/cgroup/service/c/cgroup.procs');
  assert.equal(ownProcsFile(v2, '0::/'), '/sys/fs/cgroup/cgroup.procs');
  assert.equal(ownProcsFile(v2, '8:pids:/'), null);
  assert.equal(ownProcsFile(v2, ''), null);
});

test('priming moves nothing: this process stays in its groups', async (t) => {
  const caps = await doctor();
  if (!caps.cgroup.usable) return t.skip(`no usable cgroup here (${caps.cgroup.detail})`);
  const before = readFileSync('/proc/self/cgroup', 'utf8');
  primeAttach(caps.cgroup);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(readFileSync('/proc/self/cgroup', 'utf8'), before);
});
