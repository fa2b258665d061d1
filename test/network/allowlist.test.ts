// Allowlist rules, the ceiling intersection and the per-destination decision (no sandbox needed).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { canonicalIp, classifyAddress } from '../../src/base/address.js';
import { intersectAllowlists, networkGrant, parseAllowEntry, parseAllowlist, type NetworkGrant } from '../../src/base/allowlist.js';
import { decide, hostAddresses } from '../../src/sandbox/egress/decide.js';
import { mapResolver } from '../../src/sandbox/egress/resolver.js';

const rule = (e: string) => {
  const r = parseAllowEntry(e);
  assert.ok('rule' in r, `${e}: ${JSON.stringify(r)}`);
  return r.rule;
};

test('entries: names, wildcards, IPs, ranges, URLs, ports (default 80 and 443)', () => {
  assert.deepEqual(rule('PyPI.org.'), { source: 'PyPI.org.', host: { kind: 'name', name: 'pypi.org' }, ports: [80, 443] });
  assert.deepEqual(rule('*.example.org:8443').host, { kind: 'wildcard', suffix: 'example.org' });
  assert.deepEqual(rule('*.example.org:8443').ports, [8443]);
  assert.deepEqual(rule('https://files.example.org/path?q').ports, [443]);
  assert.deepEqual(rule('http://files.example.org:8080').ports, [8080]);
  assert.deepEqual(rule('10.0.0.0/8').host, { kind: 'cidr', net: '10.0.0.0', prefix: 8 });
  assert.deepEqual(rule('[::ffff:127.0.0.1]:80').host, { kind: 'ip', ip: '127.0.0.1' });
  assert.deepEqual(rule('[2001:DB8::1]').host, { kind: 'ip', ip: '2001:db8::1' });
  for (const badEntry of ['*', '*.org', 'a b', 'ftp://x.org', 'x.org:0', 'x.org:70000', '2130706433', '0x7f.1', '127.1', '[nope]', 'a:b:c', '-x.org', '']) {
    const r = parseAllowEntry(badEntry);
    assert.ok('problem' in r && r.problem.code === 'NET_ALLOW_ENTRY', `${badEntry} must be refused`);
  }
});

test('parsing never throws on hostile input', () => {
  fc.assert(fc.property(fc.array(fc.string({ maxLength: 400 }), { maxLength: 20 }), (xs) => void parseAllowlist(xs)));
  fc.assert(fc.property(fc.string({ maxLength: 200 }), (x) => void canonicalIp(x)));
});

test('the intersection never widens the ceiling', () => {
  const r = intersectAllowlists(parseAllowlist(['api.example.org', '*.example.org:8443', 'other.net', '*.b.example.org:443']).rules, parseAllowlist(['*.example.org:443', 'example.org']).rules);
  assert.deepEqual(r.map((x) => [x.host, x.ports]), [
    [{ kind: 'name', name: 'api.example.org' }, [443]],
    [{ kind: 'wildcard', suffix: 'b.example.org' }, [443]],
  ]);
  const g = networkGrant(['api.example.org'], { allow: false, allowlist: [] });
  assert.deepEqual(g.grant.rules, []);
});

const grant = (req: string[], pol: string[]): NetworkGrant => networkGrant(req, { allow: true, allowlist: pol }).grant;
const dns = mapResolver({
  'api.example.org': ['93.184.216.34'],
  'rebind.example.org': ['127.0.0.1'],
  'meta.example.org': ['169.254.169.254'],
  'v6.example.org': ['::1'],
  'mapped.example.org': ['::ffff:10.1.2.3'],
  'mixed.example.org': ['10.0.0.1', '93.184.216.35'],
  'lan.example.org': ['10.1.2.3'],
  'self.example.org': ['93.184.216.99'],
});

test('decisions: name and port, then the address it resolves to', async () => {
  const g = grant(['*.example.org', '93.184.216.34:443'], ['*.example.org', '93.184.216.34:443', '10.0.0.0/8:443']);
  const d = async (h: string, p: number) => decide(g, h, p, dns);
  assert.deepEqual(await d('API.example.org.', 443), { allowed: true, host: 'api.example.org', port: 443, address: '93.184.216.34', rule: '*.example.org' });
  assert.equal((await d('api.example.org', 22)).allowed, false);
  assert.equal(((await d('api.example.org', 22)) as { code: string }).code, 'NET_PORT_NOT_ALLOWED');
  assert.equal(((await d('example.org', 443)) as { code: string }).code, 'NET_NAME_NOT_ALLOWED', 'a wildcard does not cover its own apex');
  assert.equal(((await d('rebind.example.org', 443)) as { code: string }).code, 'NET_SPECIAL_ADDRESS');
  assert.equal(((await d('meta.example.org', 80)) as { code: string }).code, 'NET_SPECIAL_ADDRESS');
  assert.equal(((await d('v6.example.org', 80)) as { code: string }).code, 'NET_SPECIAL_ADDRESS');
  // A public address that is this host's own (as if 93.184.216.99 were on one of its interfaces).
  const self = await decide(g, 'self.example.org', 443, dns, () => new Set(['93.184.216.99']));
  assert.match((self as { reason: string }).reason, /resolves to 93\.184\.216\.99 \(this host\), which no policy address rule names/);
  assert.equal((await decide(g, 'self.example.org', 443, dns, () => new Set())).allowed, true, 'the same address when it is not the host\'s');
  assert.ok(hostAddresses().has('127.0.0.1'), 'the host\'s own addresses are read from its interfaces');
  assert.equal(((await d('mapped.example.org', 80)) as { code: string }).code, 'NET_SPECIAL_ADDRESS', 'an IPv4-mapped address is checked as IPv4 (10/8 only on 443)');
  assert.deepEqual(await d('lan.example.org', 443), { allowed: true, host: 'lan.example.org', port: 443, address: '10.1.2.3', rule: '*.example.org', addressRule: '10.0.0.0/8:443' });
  assert.equal(((await d('mixed.example.org', 80)) as { address: string }).address, '93.184.216.35', 'only a checked address is used');
  assert.equal(((await d('nowhere.example.org', 443)) as { code: string }).code, 'NET_RESOLVE_FAILED');
  assert.equal(((await d('93.184.216.34', 443)) as { allowed: boolean }).allowed, true, 'a listed IP literal');
  for (const lit of ['93.184.216.34:80', '127.0.0.1:443', '[::1]:443', '2130706433:443', '0x7f000001:443']) {
    const [h, p] = [lit.slice(0, lit.lastIndexOf(':')), Number(lit.slice(lit.lastIndexOf(':') + 1))];
    assert.equal(((await d(h, p)) as { code: string }).code, 'NET_IP_LITERAL', lit);
  }
});

test('address classes', () => {
  for (const [ip, cls] of [['127.0.0.2', 'loopback'], ['10.9.9.9', 'private'], ['172.31.0.1', 'private'], ['192.168.1.1', 'private'], ['169.254.169.254', 'link-local'], ['0.0.0.0', 'unspecified'], ['::1', 'loopback'], ['fd00:ec2::254', 'private'], ['fe80::1', 'link-local'], ['100.64.0.1', 'shared'], ['8.8.8.8', 'public'], ['2606:4700::1111', 'public'], ['::127.0.0.1', 'reserved'], ['::7f00:1', 'reserved'], ['::ffff:0:7f00:1', 'reserved'], ['::ffff:0:a09:909', 'reserved']] as const) {
    assert.equal(classifyAddress(canonicalIp(ip)!), cls, ip);
  }
});
