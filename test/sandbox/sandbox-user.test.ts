// Which host user the sandbox runs as (sandbox-user.ts), and an attack on a live run by another
// service of the host that runs as `nobody`: with Airlock's own user it can neither write into the
// run's /out or scope overlays nor signal the sandbox's processes.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { chooseSandboxUser } from '../../src/sandbox/sandbox-user.js';
import { run, text, until } from './helpers-ns.js';

const PASSWD = 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n';
const GROUP = 'root:x:0:\nnogroup:x:65534:\n';

test('the sandbox user: airlock-sandbox when it shares nothing, else nobody with the reason, else none', () => {
  const own = 'airlock-sandbox:x:999:995:Airlock sandboxes:/nonexistent:/usr/sbin/nologin\n';
  assert.deepEqual(chooseSandboxUser(PASSWD + own, GROUP + 'airlock-sandbox:x:995:\n'), { name: 'airlock-sandbox', uid: 999, gid: 995, dedicated: true });
  assert.deepEqual(chooseSandboxUser(PASSWD, GROUP), { name: 'nobody', uid: 65534, gid: 65534, dedicated: false, shared: 'the host has no airlock-sandbox user' });
  const refused = (passwd: string, group: string): string | undefined => chooseSandboxUser(PASSWD + passwd, GROUP + group)?.shared;
  assert.match(refused('airlock-sandbox:x:0:995::/:/bin/sh\n', '') ?? '', /refused: airlock-sandbox has uid 0 \/ gid 995: root's ids/);
  assert.match(refused('airlock-sandbox:x:999:0::/:/bin/sh\n', '') ?? '', /refused: .* root's ids/);
  assert.match(refused('airlock-sandbox:x:65534:995::/:/bin/sh\n', '') ?? '', /refused: airlock-sandbox has uid 65534, the host's nobody/);
  assert.match(refused('airlock-sandbox:x:999:995::/:/bin/sh\nsvc:x:999:1000::/:/bin/sh\n', '') ?? '', /refused: uid 999 of airlock-sandbox is also svc/);
  assert.match(refused('airlock-sandbox:x:999:995::/:/bin/sh\nweb:x:1001:995::/:/bin/sh\n', '') ?? '', /refused: group 995 of airlock-sandbox is also the primary group of web/);
  assert.match(refused('airlock-sandbox:x:999:995::/:/bin/sh\n', 'airlock-sandbox:x:995:alice,bob\n') ?? '', /refused: group 995 of airlock-sandbox has members: alice, bob/);
  assert.match(refused('airlock-sandbox:x:999:995::/:/bin/sh\n', 'airlock-sandbox:x:995:\ndocker:x:998:alice,airlock-sandbox\n') ?? '', /refused: airlock-sandbox is also a member of docker$/);
  assert.equal(chooseSandboxUser('root:x:0:0::/:/bin/sh\n', 'root:x:0:\n'), null, 'neither: no user to run as (doctor blocks the ns lane)');
});

test('the sandbox user is refused when its group is nogroup, or when its gid has a second name in /etc/group', () => {
  // A host whose nobody is not in nogroup (nobody:65534:65533): no user has 65534 as primary group.
  const passwd = 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65533:nobody:/nonexistent:/usr/sbin/nologin\n';
  const group = 'root:x:0:\nnobody:x:65533:\nnogroup:x:65534:\n';
  assert.match(chooseSandboxUser(passwd + 'airlock-sandbox:x:999:65534::/:/bin/sh\n', group)?.shared ?? '', /refused: airlock-sandbox has gid 65534, the host's nogroup/);
  const own = 'airlock-sandbox:x:999:995::/:/bin/sh\n';
  assert.match(chooseSandboxUser(PASSWD + own, GROUP + 'airlock-sandbox:x:995:\nweb:x:995:alice\n')?.shared ?? '', /refused: group 995 of airlock-sandbox has 2 names: airlock-sandbox, web/);
  assert.equal(chooseSandboxUser(PASSWD + own, GROUP + 'airlock:x:995:\n')?.dedicated, true, 'a group of its own under another name is fine');
});

/** This run's host /out, found by root from the marker the program wrote into it. */
function outStageHolding(marker: string): string | null {
  for (const base of readdirSync(tmpdir()).filter((n) => n.startsWith('airlock-ns-'))) {
    let runs: string[];
    try {
      runs = readdirSync(join(tmpdir(), base));
    } catch {
      continue; // another process's base, gone or not ours to list
    }
    for (const r of runs) for (const out of [join(tmpdir(), base, r, 'rw', 'out'), join(tmpdir(), base, r, 'out')]) if (existsSync(join(out, marker))) return out;
  }
  return null;
}

/** The sandboxed processes of this run (the host uid is the sandbox's, the command line names the marker). */
function sandboxPids(uid: number, marker: string): number[] {
  return readdirSync('/proc')
    .filter((n) => /^[0-9]+$/.test(n))
    .filter((pid) => {
      try {
        return Number(/^Uid:\s+([0-9]+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) === uid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker);
      } catch {
        return false;
      }
    })
    .map(Number);
}

// The other service: as uid/gid 65534, tries each attack on the run and prints what happened.
const ATTACKER = `
import json, os, sys
out, pids = sys.argv[1], [int(p) for p in sys.argv[2].split(',') if p]
def attempt(f):
    try:
        f(); return 'DONE'
    except OSError as e:
        return os.strerror(e.errno)
r = {}
r['list the run folder'] = attempt(lambda: os.listdir(os.path.dirname(out)))
r['write into /out'] = attempt(lambda: open(os.path.join(out, 'planted.txt'), 'w').write('from outside'))
r['replace the marker'] = attempt(lambda: os.rename(os.path.join(out, sys.argv[3]), os.path.join(out, 'moved')))
r['signal the sandbox'] = [attempt(lambda p=p: os.kill(p, 0)) for p in pids]
print(json.dumps(r))
`;

test('another host service running as nobody cannot reach a live run: its /out, its files, its processes', { skip: process.getuid?.() !== 0 ? 'needs root (as another user the sandbox runs as that user)' : false }, async () => {
  const scope = mkdtempSync(join('/var/tmp', 'airlock-uid-scope-'));
  chmodSync(scope, 0o777);
  writeFileSync(join(scope, 'keep.txt'), 'original');
  const marker = `marker-${randomBytes(6).toString('hex')}`;
  try {
    const running = run(['/bin/sh', '-c', `echo mine > /out/${marker}; echo new > ${scope}/inside.txt; exec python3 -c 'import time; time.sleep(3)' ${marker}`], { scopes: [{ hostPath: scope }], limits: { wallMs: 20_000 } });
    let out: string | null = null;
    let pids: number[] = [];
    // The run's host uid: its own (run-ids.ts), the owner of its /out.
    await until('the run to write its marker and sleep', () => (out ??= outStageHolding(marker)) !== null && (pids = sandboxPids(statSync(out).uid, marker)).length > 0, () => ({ out, pids }));
    const attack = spawnSync('python3', ['-c', ATTACKER, out!, pids.join(','), marker], { uid: 65534, gid: 65534, encoding: 'utf8' });
    assert.equal(attack.status, 0, attack.stderr);
    const report = JSON.parse(attack.stdout) as Record<string, string | string[]>;
    assert.deepEqual(report, {
      'list the run folder': 'Permission denied',
      'write into /out': 'Permission denied',
      'replace the marker': 'Permission denied',
      'signal the sandbox': pids.map(() => 'Operation not permitted'),
    }, JSON.stringify(report));
    const o = await running;
    assert.equal(o.status, 'SUCCESS', text(o));
    assert.equal(o.host.hostUid, statSync(out!).uid);
    assert.deepEqual(o.fs.out?.map((c) => c.path), [`/out/${marker}`], 'nothing planted from outside');
    assert.equal(readFileSync(join(scope, 'keep.txt'), 'utf8'), 'original');
  } finally {
    rmSync(scope, { recursive: true, force: true });
  }
});
