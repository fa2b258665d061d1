import assert from 'node:assert/strict';
import { test } from 'node:test';
import { probeReason, withoutProbes } from '../../src/sandbox/observe/probes.js';
import type { NetworkAttempt } from '../../src/sandbox/observe/types.js';

const unix = (path: string, result = 'ENOENT', syscall = 'connect'): NetworkAttempt => ({ syscall, family: 'unix', protocol: 'stream', address: null, port: null, path, result });
const inet = (syscall: string, address: string, port: number, family: 'inet' | 'inet6' = 'inet'): NetworkAttempt => ({ syscall, family, protocol: 'tcp', address, port, path: null, result: 'ok' });
const hostHas = (paths: string[]) => (p: string) => paths.includes(p);

test('glibc asking an nscd that exists nowhere is a probe, not network use', () => {
  assert.match(probeReason(unix('/var/run/nscd/socket'), hostHas([])) ?? '', /glibc's nscd probe/);
  assert.match(probeReason(unix('/var/run/other/socket'), hostHas([])) ?? '', /exists nowhere/);
  assert.match(probeReason(unix('/run/nscd//socket', 'ENOENT', 'sendto'), hostHas([])) ?? '', /\/run\/nscd\/socket/);
});

test('a unix socket that exists on the host, one that answered, an abstract or relative one, a bind: reported', () => {
  assert.equal(probeReason(unix('/run/postgresql/.s.PGSQL.5432'), hostHas(['/run/postgresql/.s.PGSQL.5432'])), null, 'a real host service hidden from the sandbox');
  assert.match(probeReason(unix('/var/run/nscd/socket'), hostHas(['/var/run/nscd/socket'])) ?? '', /glibc's nscd probe/, 'glibc asks nscd even where the host runs it: the sandbox never holds that socket');
  assert.equal(probeReason(unix('/var/run/nscd/socket', 'ECONNREFUSED'), hostHas([])), null, 'something answered');
  assert.equal(probeReason(unix('/tmp/x.sock', 'ECONNREFUSED'), hostHas([])), null, 'something was there');
  assert.equal(probeReason(unix('/tmp/x.sock', 'ok'), hostHas([])), null);
  assert.equal(probeReason(unix('@abstract'), hostHas([])), null);
  assert.equal(probeReason(unix('rel.sock'), hostHas([])), null);
  assert.equal(probeReason(unix('/nowhere.sock', 'ENOENT', 'bind'), hostHas([])), null);
});

test('a loopback bind to port 0 is a probe; a fixed port, another address or a connect is not', () => {
  assert.ok(probeReason(inet('bind', '::1', 0, 'inet6')));
  assert.ok(probeReason(inet('bind', '127.0.0.1', 0)));
  assert.equal(probeReason(inet('bind', '127.0.0.1', 8080)), null);
  assert.equal(probeReason(inet('bind', '0.0.0.0', 0)), null);
  assert.equal(probeReason(inet('connect', '::1', 0, 'inet6')), null);
  assert.equal(probeReason(inet('connect', '127.0.0.1', 5432)), null);
});

test('withoutProbes keeps every other attempt, in order, and asks the host once per path', () => {
  let asked = 0;
  const exists = (p: string) => (asked++, p === '/run/pg.sock');
  const kept = withoutProbes([unix('/var/run/gone.sock'), inet('connect', '1.1.1.1', 443), unix('/var/run/gone.sock'), unix('/var/run/nscd/socket'), unix('/run/pg.sock')], exists);
  assert.deepEqual(kept.map((n) => n.path ?? n.address), ['1.1.1.1', '/run/pg.sock']);
  assert.equal(asked, 2);
});
