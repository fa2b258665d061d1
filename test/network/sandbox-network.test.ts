// Network by allowlist, end to end: real bwrap runs whose only way out is the host proxy. Local HTTP
// servers on the host's 127.0.0.1 stand in for the internet; test names map to them through an
// injected resolver; the policy ceiling names 127.0.0.1:<port> explicitly (loopback is otherwise
// refused). Each attack must fail AND be on the record: observation, Sandbox Result, Tool Result.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Action } from '../../src/action/action.js';
import { actionFromDescriptor } from '../../src/action/from-action-descriptor.js';
import { actionDescriptorContract } from '../../src/contracts/action-descriptor.js';
import { descriptor } from '../helpers/descriptors.js';
import { sandboxResultContract } from '../../src/contracts/sandbox-result.js';
import { toolResultContract } from '../../src/contracts/tool-result.js';
import { judge } from '../../src/judge/judge.js';
import type { NetworkCaps } from '../../src/sandbox/egress/records.js';
import { mapResolver } from '../../src/sandbox/egress/resolver.js';
import { buildSandboxResult } from '../../src/report/sandbox-result.js';
import { buildToolResult } from '../../src/gates/tool-result-render.js';
import { runInNsLane, type LaneNetworkContext } from '../../src/sandbox/lanes/ns.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import { makeCert } from './helpers-tls.js';

let server: Server;
let other: Server;
let secure: Server;
let port = 0;
let otherPort = 0;
let tlsPort = 0;
const seenHosts: string[] = [];

before(async () => {
  server = createServer((req, res) => {
    seenHosts.push(String(req.headers.host));
    const u = new URL(req.url ?? '/', 'http://x');
    if (u.pathname === '/hello') return void res.end('hello\n');
    if (u.pathname === '/redirect-off') return void res.writeHead(302, { location: `http://evil.example.org:${port}/hello` }).end();
    if (u.pathname === '/redirect-on') return void res.writeHead(302, { location: '/hello' }).end();
    if (u.pathname === '/big') return void res.end(Buffer.alloc(Number(u.searchParams.get('n') ?? 0), 97));
    if (u.pathname === '/upload') {
      let n = 0;
      req.on('data', (c: Buffer) => (n += c.length));
      req.on('end', () => res.end(`got ${n}\n`));
      return;
    }
    res.writeHead(404).end();
  });
  other = createServer((_req, res) => res.end('other port\n'));
  // An HTTPS server for api.airlock.test (a throwaway self-signed certificate; clients use -k).
  secure = createTlsServer(makeCert('api.airlock.test'), (_req, res) => res.end('secure hello\n'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
  await new Promise<void>((r) => secure.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
  otherPort = (other.address() as AddressInfo).port;
  tlsPort = (secure.address() as AddressInfo).port;
});

after(async () => {
  server.close();
  other.close();
  secure.close();
  await sandboxIdle();
});

const resolve = () =>
  mapResolver({ 'api.airlock.test': ['127.0.0.1'], 'local.airlock.test': ['127.0.0.1'], 'meta.airlock.test': ['169.254.169.254'], 'evil.example.org': ['127.0.0.1'] });

/** The test's policy: the names, and the loopback address of the test server, named explicitly. */
const ceiling = (withLoopback = true) => ({ allow: true, allowlist: [`*.airlock.test:${port}`, `*.airlock.test:${otherPort}`, `*.airlock.test:${tlsPort}`, ...(withLoopback ? [`127.0.0.1:${port}`, `127.0.0.1:${otherPort}`, `127.0.0.1:${tlsPort}`] : [])] });

function action(argv: string[], allowlist: string[], slug: string): Action {
  return {
    id: `TR-20260301-120000Z-net-${slug}`,
    source: 'tool-request',
    kind: 'TEST',
    preconditions: { pathsExist: [], networkAvailable: false, userIdle: false },
    cooldownOnRepeat: false,
    lane: 'ns',
    run: { kind: 'argv', argv },
    inputs: [],
    outputsExpected: [],
    scope: { paths: [], recursive: false },
    effects: { create: [], modify: [], delete: [], network: allowlist.length > 0, systemStateChange: false },
    limits: { wallMs: 15_000, cpuMs: 10_000, memoryBytes: 256 << 20, diskBytes: 1 << 20, files: 1000, pids: 64, stdoutBytes: 64 << 10, stderrBytes: 64 << 10 },
    network: { mode: allowlist.length > 0 ? 'allowlist' : 'none', allowlist },
    risk: 'LOW',
    confirmationRequired: false,
    rollbackSupported: true,
    sandboxRequired: true,
    display: argv.join(' '),
  };
}

const CAPS: NetworkCaps = { bytesOut: 1 << 20, bytesIn: 8 << 20, connections: 32 };

/** Runs in the ns lane and builds both results, each checked against its own contract. */
async function runNet(program: Program, opts: { allowlist?: string[]; slug: string; network?: Partial<LaneNetworkContext>; caps?: Partial<NetworkCaps> }) {
  const base = mkdtempSync(join(tmpdir(), 'airlock-net-test-'));
  const name = 'sh' in program ? 'main.sh' : 'main.py';
  const body = 'sh' in program ? program.sh : program.py;
  mkdirSync(join(base, 'in'));
  writeFileSync(join(base, 'in', name), body);
  const argv = 'sh' in program ? ['/bin/sh', name] : ['python3', name];
  const a = action(argv, opts.allowlist ?? [`api.airlock.test:${port}`], opts.slug);
  a.inputs = [{ name, sha256: createHash('sha256').update(body).digest('hex') }];
  const out = join(base, 'out');
  const lane = await runInNsLane(a, { inputsDir: join(base, 'in'), outDir: out, network: { ceiling: ceiling(), resolve: resolve(), caps: { ...CAPS, ...opts.caps }, ...opts.network } });
  assert.ok(lane.ok, `lane refused: ${JSON.stringify(!lane.ok && lane.problems)}`);
  const obs = lane.observation;
  const judgement = judge(a, obs);
  const sr = buildSandboxResult({ action: a, sandboxId: 'sbx-test', obs, judgement });
  const srParsed = sandboxResultContract.parse(sandboxResultContract.render(sr));
  assert.ok(srParsed.ok, `the Sandbox Result is valid: ${JSON.stringify(!srParsed.ok && srParsed.problems)}`);
  const { result } = buildToolResult({ action: a, argv, obs, judgement, backend: 'airlock-ns (test)' });
  const text = toolResultContract.render(result);
  const ts = toolResultContract.parse(text, { fileName: `${result.result_id}.md` });
  assert.ok(ts.ok, `the Tool Result is valid: ${JSON.stringify(!ts.ok && ts.problems)}`);
  const stdout = obs.stdout.bytes.toString();
  const dump = `status=${obs.status} reason=${obs.reason} stdout=${stdout.slice(0, 400)} stderr=${obs.stderr.bytes.toString().slice(0, 600)} net=${JSON.stringify(obs.network?.connections)}`;
  return { obs, judgement, sr, ts: result, stdout, dump };
}

// Programs travel as an input file (/in/main.sh or /in/main.py): a Tool Result that quotes
// `curl http://...` is (rightly) refused by its contract as an instruction to fetch.
type Program = { sh: string } | { py: string };
const sh = (script: string): Program => ({ sh: script });
const py = (code: string): Program => ({ py: code });
const PY_GET = (url: string): Program => py(`import urllib.request,sys\ntry:\n print(urllib.request.urlopen('${url}', timeout=5).read().decode(), end='')\nexcept Exception as e:\n print('FAILED', e); sys.exit(3)`);

test('an allowed fetch (python urllib, plain HTTP via the proxy variables) works and is reported everywhere', async () => {
  seenHosts.length = 0;
  const r = await runNet(PY_GET(`http://api.airlock.test:${port}/hello`), { slug: 'allowed' });
  assert.equal(r.obs.status, 'SUCCESS', r.dump);
  assert.equal(r.stdout, 'hello\n');
  const c = r.obs.network?.connections ?? [];
  assert.equal(c.length, 1, r.dump);
  assert.deepEqual({ via: c[0]!.via, host: c[0]!.host, port: c[0]!.port, address: c[0]!.address, allowed: c[0]!.allowed, connected: c[0]!.connected, code: c[0]!.code, status: c[0]!.httpStatus }, { via: 'http', host: 'api.airlock.test', port, address: '127.0.0.1', allowed: true, connected: true, code: 'NET_ALLOWED', status: 200 });
  assert.match(c[0]!.rule ?? '', /api\.airlock\.test.*127\.0\.0\.1/, 'the rule that decided, name and address');
  assert.ok(c[0]!.bytesOut > 0 && c[0]!.bytesIn > 0 && c[0]!.durationMs !== null);
  assert.equal(r.sr.resources.network_bytes_out, c[0]!.bytesOut);
  assert.equal(r.sr.resources.network_bytes_in, c[0]!.bytesIn);
  assert.deepEqual(r.sr.side_effects.network_attempts, [{ address: 'api.airlock.test', port, protocol: 'tcp', allowed: true }]);
  assert.equal(r.sr.side_effects.network_used, true);
  assert.equal(r.sr.compliance.no_undeclared_network, true, r.judgement.reasons.join('\n'));
  assert.notEqual(r.sr.verdict.recommended_action, 'BLOCK', r.judgement.reasons.join('\n'));
  assert.equal(r.ts.network_used, 'allowlist');
  assert.deepEqual(r.ts.network_destinations, [`api.airlock.test:${port}`]);
  assert.match(r.ts.safety_notes.network_confirmation, new RegExp(`api\\.airlock\\.test:${port}`));
  assert.deepEqual(seenHosts, [`api.airlock.test:${port}`], 'the server saw the name asked for as Host');
});

test('an allowed CONNECT tunnel (curl, HTTPS) works; a redirect inside the list is followed', async () => {
  const r = await runNet(sh(`curl -sS -k --max-time 5 https://api.airlock.test:${tlsPort}/hello && curl -sS -L --max-time 5 http://api.airlock.test:${port}/redirect-on`), { slug: 'connect', allowlist: [`api.airlock.test:${port}`, `api.airlock.test:${tlsPort}`] });
  assert.equal(r.obs.status, 'SUCCESS', r.dump);
  assert.equal(r.stdout, 'secure hello\nhello\n');
  const c = r.obs.network?.connections ?? [];
  assert.ok(c.some((x) => x.via === 'connect' && x.allowed && x.connected && x.bytesIn > 0 && x.sni === 'api.airlock.test'), r.dump);
  assert.ok(c.some((x) => x.via === 'redirect' && x.allowed), r.dump);
  assert.equal(r.sr.compliance.no_undeclared_network, true, r.judgement.reasons.join('\n'));
  assert.deepEqual(r.ts.network_destinations, [`api.airlock.test:${tlsPort}`, `api.airlock.test:${port}`]);
});

test('domain fronting: a tunnel allowed for one name that asks TLS for another, or carries plain HTTP, is cut and reported', async () => {
  // The hostile program speaks to the proxy itself: CONNECT to the allowed name, then TLS for another.
  const fronted = py(
    [
      'import socket, ssl',
      `s = socket.create_connection(('127.0.0.1', 3128), timeout=5)`,
      `s.sendall(b'CONNECT api.airlock.test:${tlsPort} HTTP/1.1\\r\\nHost: api.airlock.test:${tlsPort}\\r\\n\\r\\n')`,
      'print(s.recv(200).split(b"\\r\\n")[0].decode())',
      'ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE',
      'try:',
      "    t = ctx.wrap_socket(s, server_hostname='evil.example.org'); t.sendall(b'GET /hello HTTP/1.1\\r\\nHost: evil.example.org\\r\\n\\r\\n'); print('GOT', t.recv(200))",
      'except Exception as e:',
      "    print('FAILED', type(e).__name__)",
    ].join('\n'),
  );
  const r = await runNet(fronted, { slug: 'front', allowlist: [`api.airlock.test:${tlsPort}`] });
  assert.match(r.stdout, /^HTTP\/1\.1 200 Connection Established\nFAILED /, r.dump);
  assertRefused(r, 'NET_SNI_MISMATCH', 'api.airlock.test', tlsPort);
  assert.equal(r.obs.network?.connections[0]?.sni, 'evil.example.org');
  assert.equal(r.obs.network?.connections[0]?.bytesOut, 0, 'nothing reached the destination');
  const plain = await runNet(sh(`curl -sS --max-time 5 --proxytunnel http://api.airlock.test:${port}/hello; echo rc=$?`), { slug: 'plain-tunnel' });
  assert.ok(!plain.stdout.includes('hello'), plain.dump);
  assertRefused(plain, 'NET_TUNNEL_NOT_TLS', 'api.airlock.test', port);
});

/** A refused request: the program fails, the record has the code, both results say so, BLOCK. */
function assertRefused(r: Awaited<ReturnType<typeof runNet>>, code: string, host: string, p: number) {
  const c = r.obs.network?.connections ?? [];
  const hit = c.find((x) => !x.allowed && x.code === code && x.host === host && x.port === p);
  assert.ok(hit, `a ${code} record for ${host}:${p}: ${r.dump}`);
  assert.ok(hit.endedAt !== null && hit.reason.length > 0);
  assert.ok(r.sr.side_effects.network_attempts?.some((n) => n.address === host && n.port === p && n.allowed === false), JSON.stringify(r.sr.side_effects.network_attempts));
  assert.equal(r.sr.compliance.no_undeclared_network, false);
  assert.equal(r.sr.verdict.recommended_action, 'BLOCK');
  assert.ok(r.sr.verdict.reasons.some((x) => x.includes(code)), r.sr.verdict.reasons.join('\n'));
  assert.match(r.ts.safety_notes.unexpected_behavior, new RegExp(code));
}

test('a name outside the list is refused (403) and reported', async () => {
  const r = await runNet(PY_GET(`http://other.example.org:${port}/hello`), { slug: 'name' });
  assert.match(r.stdout, /^FAILED HTTP Error 403/, r.dump);
  assertRefused(r, 'NET_NAME_NOT_ALLOWED', 'other.example.org', port);
  assert.equal(r.ts.network_used, 'none');
  assert.deepEqual(r.ts.network_destinations, []);
});

test('an IP literal is refused unless listed, even the test server\'s own address', async () => {
  const r = await runNet(sh(`curl -sS --max-time 5 http://127.0.0.1:${port}/hello; curl -sS --max-time 5 --proxytunnel http://93.184.216.34:443/ ; echo rc=$?`), { slug: 'ip' });
  assert.ok(!r.stdout.includes('hello'), r.dump);
  assertRefused(r, 'NET_IP_LITERAL', '127.0.0.1', port);
  assertRefused(r, 'NET_IP_LITERAL', '93.184.216.34', 443);
});

test('a redirect that leaves the list is withheld and reported', async () => {
  const r = await runNet(PY_GET(`http://api.airlock.test:${port}/redirect-off`), { slug: 'redirect' });
  assert.match(r.stdout, /^FAILED HTTP Error 403/, r.dump);
  assertRefused(r, 'NET_REDIRECT_OFF_LIST', 'evil.example.org', port);
  const first = r.obs.network!.connections[0]!;
  assert.equal(first.httpStatus, 302);
  assert.match(first.reason, /redirect was withheld/);
});

test('a CONNECT to a port outside the list is refused and reported', async () => {
  const r = await runNet(sh(`curl -sS --max-time 5 --proxytunnel http://api.airlock.test:${otherPort}/; echo rc=$?`), { slug: 'port' });
  assert.ok(!r.stdout.includes('other port'), r.dump);
  assertRefused(r, 'NET_PORT_NOT_ALLOWED', 'api.airlock.test', otherPort);
  assert.equal(r.obs.network!.connections[0]!.via, 'connect');
});

test('names resolving to 127.0.0.1 (no loopback rule) or 169.254.169.254 (metadata) are refused and reported', async () => {
  const allowlist = [`local.airlock.test:${port}`, `meta.airlock.test:${port}`];
  const r = await runNet(sh(`curl -sS --max-time 5 http://local.airlock.test:${port}/hello; curl -sS --max-time 5 --proxytunnel http://meta.airlock.test:${port}/latest/meta-data/; echo done`), {
    slug: 'rebind',
    allowlist,
    network: { ceiling: ceiling(false) },
  });
  assert.ok(!r.stdout.includes('hello'), r.dump);
  assertRefused(r, 'NET_SPECIAL_ADDRESS', 'local.airlock.test', port);
  assertRefused(r, 'NET_SPECIAL_ADDRESS', 'meta.airlock.test', port);
  assert.match(r.obs.network!.connections.find((c) => c.host === 'meta.airlock.test')!.reason, /169\.254\.169\.254 \(link-local\)/);
});

test('raw TCP and UDP around the proxy reach nothing (the sandbox loopback is its own) and are reported', async () => {
  const code = [
    'import socket',
    's=socket.socket()',
    'try:',
    ` s.connect(('127.0.0.1',${port})); print('TCP CONNECTED')`,
    'except OSError as e: print("tcp", e.errno)',
    'u=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)',
    'try:',
    " u.sendto(b'x',('8.8.8.8',53)); print('UDP SENT')",
    'except OSError as e: print("udp", e.errno)',
  ].join('\n');
  const r = await runNet(py(code), { slug: 'raw' });
  assert.match(r.stdout, /^tcp \d+\nudp \d+\n$/, r.dump);
  assert.deepEqual(r.obs.network?.connections, [], 'nothing reached the proxy');
  const attempts = r.sr.side_effects.network_attempts ?? [];
  assert.ok(attempts.some((n) => n.address === '127.0.0.1' && n.port === port && n.protocol === 'tcp' && !n.allowed), JSON.stringify(attempts));
  assert.ok(attempts.some((n) => n.address === '8.8.8.8' && n.port === 53 && n.protocol === 'udp' && !n.allowed), JSON.stringify(attempts));
  assert.equal(r.sr.compliance.no_undeclared_network, false);
  assert.equal(r.sr.verdict.recommended_action, 'BLOCK');
  assert.match(r.ts.safety_notes.unexpected_behavior, /around the proxy/);
});

test('an upload past the bytes-out cap is cut, the run ends, and both results say so', async () => {
  const code = `import urllib.request,sys\ntry:\n print(urllib.request.urlopen(urllib.request.Request('http://api.airlock.test:${port}/upload', data=b'x'*(1<<20), method='POST'), timeout=5).read())\nexcept Exception as e:\n print('FAILED', type(e).__name__); sys.exit(3)`;
  const r = await runNet(py(code), { slug: 'cap', caps: { bytesOut: 64 * 1024 } });
  assert.ok(!r.stdout.includes('got'), r.dump);
  assert.deepEqual(r.obs.network?.capsHit, ['networkBytesOut'], r.dump);
  assert.ok((r.obs.network?.bytesOut ?? Infinity) <= 64 * 1024, `no more than the cap left the host: ${r.obs.network?.bytesOut}`);
  assert.ok(r.obs.network?.connections.some((c) => c.code === 'NET_CAP_BYTES_OUT'), r.dump);
  assert.equal(r.sr.compliance.resources_within_limits, false);
  assert.equal(r.sr.verdict.recommended_action, 'BLOCK');
  assert.ok(r.sr.verdict.reasons.some((x) => /networkBytesOut/.test(x)), r.sr.verdict.reasons.join('\n'));
  assert.match(r.ts.safety_notes.unexpected_behavior, /network caps/);
});

test('the bytes-in and connection caps hold too', async () => {
  const big = await runNet(PY_GET(`http://api.airlock.test:${port}/big?n=${2 << 20}`), { slug: 'capin', caps: { bytesIn: 256 * 1024 } });
  assert.deepEqual(big.obs.network?.capsHit, ['networkBytesIn'], big.dump);
  // The record counts what the host read off the wire (a little past the cap: what the kernel and
  // Node read ahead before the cut); the sandbox itself never gets more than the cap. The 2 MiB body
  // was not transferred.
  assert.ok((big.obs.network?.bytesIn ?? Infinity) < 1 << 20, `bytes in ${big.obs.network?.bytesIn}`);
  assert.ok(big.obs.network?.connections.some((c) => c.code === 'NET_CAP_BYTES_IN'), big.dump);
  assert.equal(big.sr.verdict.recommended_action, 'BLOCK');
  const many = await runNet(sh(`for i in 1 2 3 4 5; do curl -sS --max-time 5 http://api.airlock.test:${port}/hello; done; sleep 2`), { slug: 'capconn', caps: { connections: 3 } });
  assert.deepEqual(many.obs.network?.capsHit, ['networkConnections'], many.dump);
  assert.equal(many.obs.network?.connections.filter((c) => c.allowed).length, 3, many.dump);
  assert.equal(many.obs.status, 'RESOURCE_KILLED', many.dump);
  assert.equal(many.sr.verdict.recommended_action, 'BLOCK');
});

/** Descriptors this node process and its perl bridge hold, sampled until stopped: the highest of each. */
function watchHostDescriptors(): { stop: () => { node: number; bridge: number } } {
  const count = (pid: number | string): number => {
    try {
      return readdirSync(`/proc/${pid}/fd`).length;
    } catch {
      return 0;
    }
  };
  const bridges = (): number[] => {
    try {
      const kids = readFileSync(`/proc/${process.pid}/task/${process.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
      return kids.map(Number).filter((k) => readFileSync(`/proc/${k}/comm`, 'utf8').trim() === 'perl');
    } catch {
      return [];
    }
  };
  const max = { node: 0, bridge: 0 };
  const t = setInterval(() => {
    max.node = Math.max(max.node, count('self'));
    for (const b of bridges()) max.bridge = Math.max(max.bridge, count(b));
  }, 20);
  return { stop: () => (clearInterval(t), max) };
}

test('10,000 idle connections to the proxy: the host holds at most the open-connections cap, and the run is ended (BLOCK)', async (t) => {
  const before = readdirSync('/proc/self/fd').length;
  const watch = watchHostDescriptors();
  const flood = await runNet(py([
    'import resource, socket, time',
    'soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)',
    'resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))',
    'held = []',
    'for i in range(10000):',
    '    try: held.append(socket.create_connection(("127.0.0.1", 3128), timeout=2))',
    '    except OSError: pass',
    'print("held", len(held), flush=True)',
    'time.sleep(10)',
  ].join('\n')), { slug: 'flood' });
  const max = watch.stop();
  t.diagnostic(`host descriptors during the flood: node +${max.node - before} (peak ${max.node}), bridge peak ${max.bridge}; ${flood.stdout.trim()}`);
  // 64 open connections, each one descriptor in node (nothing went upstream), plus node's own churn.
  assert.ok(max.node - before <= 64 + 40, `node held ${max.node - before} more descriptors (cap 64): ${flood.dump}`);
  assert.ok(max.bridge <= 2 * (64 + 8) + 16, `the bridge held ${max.bridge} descriptors`);
  assert.equal(flood.obs.status, 'RESOURCE_KILLED', flood.dump);
  assert.deepEqual(flood.obs.network?.capsHit, ['networkOpenConnections'], flood.dump);
  assert.ok(flood.obs.network?.connections.some((c) => c.code === 'NET_CAP_OPEN_CONNECTIONS'), flood.dump);
  assert.equal(flood.sr.verdict.recommended_action, 'BLOCK');
});

test('a connection that carries nothing for the idle time is closed by the host; the run goes on', async () => {
  const idle = await runNet(py([
    'import socket, time',
    'held = [socket.create_connection(("127.0.0.1", 3128), timeout=5) for i in range(5)]',
    'time.sleep(1.5)',
    'print("closed", sum(1 for s in held if s.recv(1) == b""))',
  ].join('\n')), { slug: 'idle', caps: { idleMs: 300 } });
  assert.equal(idle.stdout, 'closed 5\n', idle.dump);
  assert.equal(idle.obs.status, 'SUCCESS', idle.dump);
  assert.deepEqual(idle.obs.network?.capsHit, []);
});

test('the Host header is the URL\'s authority (no fronting behind an allowed name)', async () => {
  seenHosts.length = 0;
  const r = await runNet(sh(`curl -sS --max-time 5 -H 'Host: evil.example.org' http://api.airlock.test:${port}/hello`), { slug: 'host' });
  assert.equal(r.stdout, 'hello\n', r.dump);
  assert.deepEqual(seenHosts, [`api.airlock.test:${port}`]);
});

test('without the network the run has no proxy at all: no variables, nothing listening', async () => {
  const r = await runNet(sh('echo "proxy=${HTTP_PROXY:-unset}"; curl -sS --max-time 3 http://127.0.0.1:3128/ 2>&1 | head -c 200; echo'), { slug: 'none', allowlist: [] });
  assert.match(r.stdout, /^proxy=unset\n/, r.dump);
  assert.match(r.stdout, /Failed to connect|Couldn't connect/, r.dump);
  assert.equal(r.obs.network, undefined);
  assert.equal(r.ts.network_used, 'none');
});

test('a request cannot widen the ceiling; no ceiling means nothing runs', async () => {
  const a = action(['true'], [`api.airlock.test:${otherPort + 1}`, 'example.com'], 'widen');
  const out = join(mkdtempSync(join(tmpdir(), 'airlock-net-test-')), 'out');
  const wide = await runInNsLane(a, { inputsDir: tmpdir(), outDir: out, network: { ceiling: ceiling() } });
  assert.ok(!wide.ok && wide.problems[0]?.code === 'LANE_NETWORK_EMPTY', JSON.stringify(wide));
  const none = await runInNsLane(a, { inputsDir: tmpdir(), outDir: out });
  assert.ok(!none.ok && none.problems[0]?.code === 'LANE_NETWORK_NO_CEILING', JSON.stringify(none));
  const off = await runInNsLane(action(['true'], [`api.airlock.test:${port}`], 'off'), { inputsDir: tmpdir(), outDir: out, network: { ceiling: { allow: false, allowlist: [] } } });
  assert.ok(!off.ok && off.problems[0]?.code === 'LANE_NETWORK_EMPTY', JSON.stringify(off));
});

test('an Action Descriptor that declares network use reaches what the policy allows, and only that', async (t) => {
  const scope = mkdtempSync('/var/tmp/airlock-net-scope-');
  chmodSync(scope, 0o755);
  t.after(() => rmSync(scope, { recursive: true, force: true }));
  const d = descriptor(scope, {
    action_type: 'COMMAND_EXECUTION',
    scope: { filesystem: { paths: [scope], recursive: false }, network: { required: true }, ui: { required: false } },
    effects: { filesystem: { create: [], modify: [], delete: [] }, network: true, system_state_change: false },
    sandbox: { required: true, sandbox_type: 'namespace', allow_network: true, max_runs: 1 },
    command: ['python3', '-c', `import urllib.request\nfor u in ['http://api.airlock.test:${port}/hello', 'http://evil.example.org:${port}/hello']:\n  try: print(urllib.request.urlopen(u, timeout=5).read().decode(), end='')\n  except Exception as e: print('refused', type(e).__name__)`],
  });
  const parsed = actionDescriptorContract.parse(JSON.stringify(d), { fileName: 'net.json' });
  assert.ok(parsed.ok, JSON.stringify(!parsed.ok && parsed.problems));
  const a = actionFromDescriptor(parsed.value);
  assert.ok(!('problems' in a));
  const base = mkdtempSync(join(tmpdir(), 'airlock-net-ad-'));
  const lane = await runInNsLane(a, { inputsDir: base, outDir: join(base, 'out'), network: { ceiling: ceiling(), resolve: resolve(), caps: CAPS } });
  assert.ok(lane.ok, JSON.stringify(!lane.ok && lane.problems));
  const obs = lane.observation;
  assert.equal(obs.stdout.bytes.toString(), 'hello\nrefused HTTPError\n');
  const c = obs.network?.connections ?? [];
  assert.deepEqual(c.map((x) => [x.host, x.allowed, x.code]), [['api.airlock.test', true, 'NET_ALLOWED'], ['evil.example.org', false, 'NET_NAME_NOT_ALLOWED']]);
  assert.equal(judge(a, obs).verdict, 'BLOCK', 'a refused attempt is outside the declaration');
});
