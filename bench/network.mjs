// node bench/network.mjs (after `npx tsc -p tsconfig.json`; `npm run bench:network` builds first).
// The proxy path's added latency and its throughput for a 1 MB and a 100 MB download from a
// loopback HTTP server, against the same download made directly on the host. The client is curl in
// both cases (one curl process per download, so both include the same exec cost); the proxy path is
// curl inside one ns sandbox run -> 127.0.0.1:3128 in the sandbox -> perl bridge -> unix socket ->
// host proxy (allowlist decision, resolver, counting) -> the server. Plain HTTP through the proxy
// and HTTPS through CONNECT tunnels are measured separately; a tunnel to the name has its ClientHello's
// server name checked, one to the listed IP address is opaque, so the pair shows the check's cost.
// Syscall tracing is off in the sandbox runs (tracer stops would measure the tracer, not the proxy);
// say so when quoting. HTTPS uses a throwaway self-signed certificate (openssl; curl -k).
import { execFileSync, spawn } from 'node:child_process';
import { Buffer } from 'node:buffer';
import { createServer } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { networkGrant } from '../dist/src/base/allowlist.js';
import { mapResolver } from '../dist/src/sandbox/egress/resolver.js';
import { runNs, sandboxIdle } from '../dist/src/sandbox/ns/runner.js';
import { fmt, summary } from './stats.mjs';

const SIZES = [
  { name: '1 MB', path: '/1m', bytes: 1 << 20, n: Number(process.env.BENCH_N_SMALL ?? 50) },
  { name: '100 MB', path: '/100m', bytes: 100 << 20, n: Number(process.env.BENCH_N_LARGE ?? 10) },
];
const bodies = new Map(SIZES.map((s) => [s.path, Buffer.alloc(s.bytes, 120)]));
const serve = (req, res) => {
  const b = bodies.get(req.url?.replace(/^https?:\/\/[^/]+/, '') ?? '');
  if (!b) return void res.writeHead(404).end();
  res.writeHead(200, { 'content-length': b.length, 'content-type': 'application/octet-stream' });
  res.end(b);
};
const server = createServer(serve);
const certs = mkdtempSync(join(tmpdir(), 'airlock-bench-cert-'));
execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=bench.airlock.test', '-days', '2', '-keyout', join(certs, 'key.pem'), '-out', join(certs, 'cert.pem')], { stdio: 'ignore' });
const secure = createTlsServer({ key: readFileSync(join(certs, 'key.pem')), cert: readFileSync(join(certs, 'cert.pem')) }, serve);
await new Promise((r) => server.listen(0, '127.0.0.1', r));
await new Promise((r) => secure.listen(0, '127.0.0.1', r));
const port = server.address().port;
const tlsPort = secure.address().port;

const curlLoop = (url, n, extra = '') => `for i in $(seq ${n}); do curl -s ${extra} -o /dev/null -w '%{time_starttransfer} %{time_total} %{size_download}\\n' ${url} || echo FAIL; done`;

function parse(text, bytes) {
  const rows = text.trim().split('\n').filter(Boolean);
  const bad = rows.filter((r) => r === 'FAIL' || Number(r.split(' ')[2]) !== bytes);
  if (bad.length) throw new Error(`failed downloads: ${bad.length} of ${rows.length}: ${text.slice(0, 300)}`);
  return rows.map((r) => r.split(' ').map(Number)).map(([ttfb, total]) => ({ ttfb: ttfb * 1000, total: total * 1000, mbps: bytes / 1e6 / total }));
}

function direct(url, n, extra = '') {
  return new Promise((resolve, reject) => {
    const c = spawn('/bin/sh', ['-c', curlLoop(url, n, extra)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    c.on('error', reject);
    c.on('close', () => resolve(out));
  });
}

const listed = [`bench.airlock.test:${port}`, `bench.airlock.test:${tlsPort}`, `127.0.0.1:${port}`, `127.0.0.1:${tlsPort}`];
const { grant } = networkGrant(listed, { allow: true, allowlist: listed });
const LIMITS = { wallMs: 600_000, cpuMs: 600_000, memoryBytes: 512 << 20, pids: 64, outBytes: 1 << 20, tmpBytes: 4 << 20, files: 10_000, stdoutBytes: 1 << 20, stderrBytes: 64 << 10 };
async function viaProxy(url, n, extra) {
  const o = await runNs({
    argv: ['/bin/sh', '-c', curlLoop(url, n, extra)],
    outDir: join(mkdtempSync(join(tmpdir(), 'airlock-bench-net-')), 'out'),
    limits: LIMITS,
    traceSyscalls: false,
    network: { grant, caps: { bytesOut: 64 << 20, bytesIn: 4 * 1024 ** 3, connections: 10_000 }, resolve: mapResolver({ 'bench.airlock.test': ['127.0.0.1'] }) },
  });
  if (o.status !== 'SUCCESS') throw new Error(`sandbox run ${o.status}: ${o.reason} ${o.stderr.bytes.toString().slice(0, 300)}`);
  return { text: o.stdout.bytes.toString(), net: o.network };
}

const line = (label, xs) => {
  const t = summary(xs.map((x) => x.total));
  const f = summary(xs.map((x) => x.ttfb));
  const m = summary(xs.map((x) => x.mbps));
  return `| ${label} | ${xs.length} | ${fmt(f.p50)} | ${fmt(f.p99)} | ${fmt(t.p50)} | ${fmt(t.p99)} | ${fmt(m.p50, 0)} | ${fmt(summary(xs.map((x) => -x.mbps)).p99 * -1, 0)} |`;
};

console.log(`network bench: loopback servers :${port} (HTTP), :${tlsPort} (HTTPS); curl per download; ns runs with traceSyscalls: false`);
console.log('| path | n | TTFB p50 ms | TTFB p99 ms | total p50 ms | total p99 ms | MB/s p50 | MB/s p1 (slowest) |');
console.log('|---|---|---|---|---|---|---|---|');
for (const s of SIZES) {
  const d = parse(await direct(`http://127.0.0.1:${port}${s.path}`, s.n), s.bytes);
  const ds = parse(await direct(`https://127.0.0.1:${tlsPort}${s.path}`, s.n, '-k'), s.bytes);
  const h = await viaProxy(`http://bench.airlock.test:${port}${s.path}`, s.n, '');
  const c = await viaProxy(`https://bench.airlock.test:${tlsPort}${s.path}`, s.n, '-k');
  const ci = await viaProxy(`https://127.0.0.1:${tlsPort}${s.path}`, s.n, '-k');
  const hp = parse(h.text, s.bytes);
  const cp = parse(c.text, s.bytes);
  const cip = parse(ci.text, s.bytes);
  console.log(line(`${s.name} direct (host), HTTP`, d));
  console.log(line(`${s.name} proxy, plain HTTP`, hp));
  console.log(line(`${s.name} direct (host), HTTPS`, ds));
  console.log(line(`${s.name} proxy, CONNECT to the name (SNI checked)`, cp));
  console.log(line(`${s.name} proxy, CONNECT to the IP (opaque)`, cip));
  const ttfb = (xs) => summary(xs.map((x) => x.ttfb)).p50;
  const records = [h, c, ci].map((x) => x.net.connections.length).join(' + ');
  console.log(`|   added TTFB p50: plain HTTP +${fmt(ttfb(hp) - ttfb(d))} ms, CONNECT to the name +${fmt(ttfb(cp) - ttfb(ds))} ms, to the IP +${fmt(ttfb(cip) - ttfb(ds))} ms; host record: ${records} connections, ${fmt([h, c, ci].reduce((n, x) => n + x.net.bytesIn, 0) / 1e6, 1)} MB in | | | | | | | |`);
}
server.close();
secure.close();
await sandboxIdle();
