// The host probe reports what this host can enforce, from real probes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { doctor, parseBwrapVersion } from '../../src/sandbox/doctor.js';
import { parseCgroupMounts } from '../../src/sandbox/cgroup/index.js';

test('doctor finds bwrap with its version and options, and plans every limit', async () => {
  const caps = await doctor();
  assert.ok(caps.bwrap, 'bubblewrap must be installed (apt-get install bubblewrap)');
  assert.match(caps.bwrap.version, /^\d+\.\d+\.\d+$/);
  const [maj, min] = caps.bwrap.versionParts;
  assert.equal(caps.bwrap.supports.disableUserns, maj > 0 || min >= 8);
  assert.equal(caps.bwrap.supports.overlay, maj > 0 || min >= 9);
  assert.deepEqual(caps.limits.map((l) => l.limit).sort(), ['cpuMs', 'files', 'memoryBytes', 'outBytes', 'pids', 'stderrBytes', 'stdoutBytes', 'tmpBytes', 'wallMs']);
  assert.ok(caps.interpreters.some((i) => i.name === 'node'));
  assert.deepEqual(caps.blockers, [], 'this host must be able to run the ns lane');
  assert.equal(caps.userNamespaces.available, true);
  for (const i of caps.interpreters) assert.ok(i.prefix.startsWith('/') && i.executable.startsWith('/'));
});

test('doctor cgroup facts match the mounted hierarchies', async () => {
  const caps = await doctor();
  if (caps.cgroup.version === 1) for (const c of caps.cgroup.controllers) assert.ok(caps.cgroup.mounts[c], c);
  if (caps.cgroup.version === 2) assert.ok(caps.cgroup.mounts.unified);
  assert.equal(caps.limits.find((l) => l.limit === 'memoryBytes')?.enforced, caps.cgroup.usable && caps.cgroup.controllers.includes('memory'));
});

test('parsers: bwrap version and cgroup mountinfo', () => {
  assert.deepEqual(parseBwrapVersion('bubblewrap 0.8.0\n'), [0, 8, 0]);
  assert.equal(parseBwrapVersion('garbage'), null);
  const mi = [
    '35 25 0:30 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory',
    '36 25 0:31 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct',
    '37 25 0:32 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw',
    'garbage line',
  ].join('\n');
  const r = parseCgroupMounts(mi);
  assert.equal(r.v1.memory, '/sys/fs/cgroup/memory');
  assert.equal(r.v1.cpuacct, '/sys/fs/cgroup/cpu,cpuacct');
  assert.deepEqual(r.v2, ['/sys/fs/cgroup/unified']);
});
