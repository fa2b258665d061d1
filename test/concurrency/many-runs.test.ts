// Many runs at once on one host (issue 21): three front doors in their own processes (CLI `airlock
// exec` loops, the folder gate `airlock serve`, a UTP worker on real NATS) each do RUNS runs at the
// same time, on ONE workspace and ONE TMPDIR; one process of each kind is SIGKILLed in the middle
// of a run and started again. Afterwards: every run that was not killed has a valid result, every
// killed one is reported as interrupted (the gate: GATE_INTERRUPTED; UTP: executor_lost; the CLI:
// its run folder has no record, i.e. it did not finish), nothing ran twice, the audit log verifies,
// and no mount, cgroup or staging folder of any of these processes is left.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { openAuditLog } from '../../src/audit/index.js';
import { tagOwner } from '../../src/base/owner.js';
import { sandboxResultContract } from '../../src/contracts/sandbox-result.js';
import { commitApproval, prepareApproval } from '../../src/gates/approve.js';
import { doctor } from '../../src/sandbox/doctor.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import type { ToolRecord } from '../../src/store/types.js';
import { callTool, type CallToolOutcome } from '../../src/utp/client.js';
import { BUILTIN_TOOLS, defaultToolSubject } from '../../src/utp/tools.js';
import { openWorkspace } from '../../src/workspace/workspace.js';
import { airlock } from '../helpers/cli.js';
import { signTool } from '../helpers/operator.js';
import { repoPath } from '../helpers/paths.js';
import { writeRequest } from '../helpers/requests.js';
import { NATS_URL } from '../store/services.js';
import { natsOrFail, token } from '../utp/harness.js';

const RUNS = Number(process.env.AIRLOCK_LOAD_RUNS ?? 50);
const children: ChildProcess[] = [];
const pids = new Set<number>();
after(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function start(cmd: string, args: string[], env: NodeJS.ProcessEnv): ChildProcess {
  const c = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(c);
  pids.add(c.pid!);
  return c;
}
const exited = (c: ChildProcess): Promise<{ code: number | null; signal: string | null }> =>
  c.exitCode !== null || c.signalCode !== null ? Promise.resolve({ code: c.exitCode, signal: c.signalCode }) : new Promise((r) => c.once('exit', (code, signal) => r({ code, signal })));
const collect = (c: ChildProcess): { out: string; err: string } => {
  const o = { out: '', err: '' };
  c.stdout!.on('data', (d: Buffer) => (o.out += d));
  c.stderr!.on('data', (d: Buffer) => (o.err += d));
  return o;
};

/** Has `pid` a sandbox under way (a run folder in its staging base, whose name carries its owner)? */
function sandboxUnderWay(tmp: string, pid: number): boolean {
  for (const n of readdirSync(tmp)) {
    if (!n.startsWith('airlock-ns-') || n.startsWith('airlock-ns-etc-') || tagOwner(n)?.pid !== pid) continue;
    try {
      if (readdirSync(join(tmp, n)).some((r) => r.startsWith('ns-'))) return true;
    } catch {
      /* being created or removed */
    }
  }
  return false;
}
/** Set when the test has ended (a failed check included): the flows still going stop at their next step. */
let ended = false;
async function until(what: string, f: () => boolean, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!f()) {
    if (ended) throw new Error(`the test ended while waiting until ${what}`);
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await sleep(25);
  }
}

test(`CLI runs, a folder gate and a UTP worker, ${RUNS} runs each at once on one workspace and TMPDIR, one of each SIGKILLed mid-run and restarted`, { timeout: 400_000 }, async (t) => {
  const caps = await doctor();
  if (!caps.isRoot || !caps.cgroup.usable || caps.blockers.length > 0) return t.skip('needs root, a usable cgroup and a working ns lane');
  const nc = await natsOrFail();
  const top = mkdtempSync(join(tmpdir(), 'airlock-many-'));
  // Whatever happens (a failed check included): an open connection or store would keep this file's
  // process alive after its test, and the whole suite would wait on it.
  const opened: { store?: SqliteStore; stream?: string } = {};
  t.after(async () => {
    ended = true;
    const alive = children.filter((c) => c.exitCode === null && c.signalCode === null);
    for (const c of alive) c.kill('SIGKILL');
    await Promise.all(alive.map(exited));
    // What they left (mounts, cgroups, staging below the test's TMPDIR): the next airlock process sweeps it.
    airlock(['exec', '--workspace', join(top, 'ws'), '--', '/bin/true'], { env: { TMPDIR: join(top, 'tmp') } });
    await opened.store?.close();
    if (opened.stream) await (await nc.jetstreamManager()).streams.delete(opened.stream).catch(() => undefined);
    await nc.close();
    rmSync(top, { recursive: true, force: true });
  });
  chmodSync(top, 0o711);
  const tmp = join(top, 'tmp');
  mkdirSync(tmp, { mode: 0o711 });
  chmodSync(tmp, 0o711);
  const wsDir = join(top, 'ws');
  const keys = join(top, 'keys');
  const env = { ...process.env, TMPDIR: tmp };
  assert.equal(airlock(['init', wsDir]).code, 0);
  assert.equal(airlock(['keygen', '--operator', 'alice', '--workspace', wsDir, '--key-dir', keys]).code, 0);
  const ws = openWorkspace(wsDir);
  const began = Date.now();

  // --- the CLI: two loops of `airlock exec` side by side; run 10 of the first loop is killed mid-run.
  const cli = { ok: 0, killed: 0, failures: [] as string[] };
  const cliLoop = async (lane: number, count: number, victim: number): Promise<void> => {
    for (let i = 0; i < count && !ended; i++) {
      const kill = i === victim;
      const c = start(repoPath('bin/airlock'), ['exec', '--workspace', wsDir, '--json', '--', ...(kill ? ['/bin/sleep', '30'] : ['/bin/true'])], env);
      const o = collect(c);
      if (kill) {
        await until(`CLI run ${lane}.${i} is in its sandbox`, () => sandboxUnderWay(tmp, c.pid!));
        c.kill('SIGKILL');
        cli.killed++;
        await exited(c);
        continue;
      }
      const r = await exited(c);
      const sr = r.code === 0 ? sandboxResultContract.parse(o.out) : null;
      if (sr?.ok && sr.value.execution.status === 'SUCCESS') cli.ok++;
      else cli.failures.push(`exec ${lane}.${i}: exit ${r.code ?? r.signal}: ${o.err.slice(-400)}`);
    }
  };

  // --- the folder gate: RUNS approved requests; request 7 sleeps, and the gate is killed during it.
  const drafts = Array.from({ length: RUNS }, (_, i) => writeRequest({ slug: `load-${String(i).padStart(3, '0')}`, command: 'python3 t.py', inputs: { 't.py': i === 7 ? 'import time\ntime.sleep(30)\n' : 'pass\n' } }, mkdtempSync(join(wsDir, 'drafts', 'd-'))));
  for (const d of drafts) {
    const now = new Date();
    const p = prepareApproval(d.file, 'alice', now);
    assert.ok(p.ok, JSON.stringify(!p.ok && p.problems));
    const c = commitApproval({ file: d.file, prepared: p.value, operator: 'alice', keyDir: keys, ws, now });
    assert.ok(c.ok, JSON.stringify(!c.ok && c.problems));
  }
  const victimId = drafts[7]!.id;
  const ledgerRows = (): { request_id: string; state: string; outcome: string | null }[] => {
    if (!existsSync(ws.storeFile)) return [];
    const db = new Database(ws.storeFile, { readonly: true, fileMustExist: true });
    try {
      return db.prepare('SELECT request_id, state, outcome FROM ledger').all() as { request_id: string; state: string; outcome: string | null }[];
    } catch {
      return []; // the table is being created
    } finally {
      db.close();
    }
  };
  const gateFlow = async (): Promise<{ code: number | null; err: string }[]> => {
    const logs: { code: number | null; err: string }[] = [];
    let gate = start(repoPath('bin/airlock'), ['serve', '--workspace', wsDir], env);
    let o = collect(gate);
    await until('the gate runs the slow request', () => existsSync(join(ws.running, `${victimId}.md`)) && ledgerRows().some((r) => r.request_id === victimId) && sandboxUnderWay(tmp, gate.pid!), 120_000);
    gate.kill('SIGKILL');
    logs.push({ ...(await exited(gate)), err: o.err });
    gate = start(repoPath('bin/airlock'), ['serve', '--workspace', wsDir], env);
    o = collect(gate);
    await until('the gate has answered every request', () => ledgerRows().filter((r) => r.state !== 'running').length === RUNS && readdirSync(ws.requestsIn).length === 0 && !readdirSync(ws.running).some((n) => n.endsWith('.md')), 240_000);
    gate.kill('SIGTERM');
    logs.push({ ...(await exited(gate)), err: o.err });
    return logs;
  };

  // --- the UTP worker: RUNS sandbox.exec calls through NATS; killed when a third are answered, restarted.
  const store = new SqliteStore(join(wsDir, 'airlock.db'));
  opened.store = store;
  await store.init();
  const project = token('p');
  const stream = token('AIRLOCK_M_').toUpperCase();
  opened.stream = stream;
  const durable = token('airlock-m-');
  const subject = defaultToolSubject('v1', project, 'ch1', 'sandbox.exec');
  const tool = { project_id: project, tool_name: 'sandbox.exec', target_subject: subject, ...(BUILTIN_TOOLS['sandbox.exec'] as object) } as ToolRecord;
  await store.upsertTool(signTool(tool, { name: 'alice', keyDir: keys }));
  const runsFile = join(top, 'utp-runs.txt');
  writeFileSync(runsFile, '');
  const workerFile = join(fileURLToPath(new URL('.', import.meta.url)), '..', 'utp', 'worker-child.js');
  // Generous leases against a loaded 2-core machine (a late heartbeat must not lose a live run's lease).
  const cfg = JSON.stringify({ nats: NATS_URL, stream, durable, workspace: wsDir, runsFile, leaseMs: 4000, ackWaitMs: 5000, concurrency: 3 });
  const startWorker = async (): Promise<ChildProcess> => {
    const w = start(process.execPath, [workerFile, cfg], env);
    let out = '';
    w.stderr!.on('data', (d: Buffer) => process.stderr.write(d));
    await new Promise<void>((resolve, reject) => {
      w.stdout!.on('data', (d: Buffer) => (out += d) && out.includes('ready') && resolve());
      w.once('exit', (code) => reject(new Error(`the UTP worker exited early (${code})`)));
    });
    return w;
  };
  let utpVictim = 0;
  const utpFlow = async (): Promise<CallToolOutcome[]> => {
    let w = await startWorker();
    utpVictim = w.pid!;
    const turn = `turn-${randomUUID()}`;
    let answered = 0;
    const calls = Array.from({ length: RUNS }, (_, i) =>
      callTool({ nats: nc, store, subject, tool: 'sandbox.exec', agentId: 'agent-m', agentTurnId: turn, toolCallId: `call-${i}`, turnEpoch: 1, arguments: { argv: ['/bin/true'] }, timeoutMs: 300_000 }).then((r) => {
        answered++;
        return r;
      }),
    );
    await until('a third of the UTP calls are answered', () => answered >= RUNS / 3, 180_000);
    await until('the UTP worker is in a sandbox', () => sandboxUnderWay(tmp, w.pid!), 60_000);
    w.kill('SIGKILL');
    await exited(w);
    w = await startWorker();
    const results = await Promise.all(calls);
    w.kill('SIGTERM');
    await exited(w);
    return results;
  };

  const half = Math.ceil(RUNS / 2);
  const [, , gateLogs, utp] = await Promise.all([cliLoop(1, half, 10), cliLoop(2, RUNS - half, -1), gateFlow(), utpFlow()]);
  const elapsed = (Date.now() - began) / 1000;

  // One more process (any airlock process sweeps what dead ones left at its start), then the checks.
  const last = airlock(['exec', '--workspace', wsDir, '--json', '--', '/bin/true'], { env: { TMPDIR: tmp } });
  assert.equal(last.code, 0, last.stderr);

  // The CLI: every run not killed has a valid, successful Sandbox Result.
  assert.deepEqual(cli.failures, []);
  assert.equal(cli.ok, RUNS - 1);
  assert.equal(cli.killed, 1);

  // The gate: every request answered once; the one it was running when killed is interrupted (never rerun).
  const rows = ledgerRows();
  assert.equal(rows.length, RUNS);
  assert.deepEqual(rows.filter((r) => r.state === 'interrupted').map((r) => r.request_id), [victimId]);
  assert.ok(rows.filter((r) => r.state === 'done').every((r) => r.outcome === 'PROMOTE'), JSON.stringify(rows.filter((r) => r.outcome !== 'PROMOTE')));
  const quarantined = readdirSync(ws.quarantine).filter((n) => n.endsWith('.reasons.json'));
  assert.deepEqual(quarantined.map((n) => JSON.parse(readFileSync(join(ws.quarantine, n), 'utf8')).problems.map((p: { code: string }) => p.code)), [['GATE_INTERRUPTED']], 'the killed run is reported as interrupted, nothing else is quarantined');
  assert.equal(readdirSync(ws.inbound).filter((n) => n.endsWith('.md')).length, RUNS - 1, 'every other request has its Tool Result in inbound/');
  assert.match(gateLogs[1]!.err, new RegExp(`${victimId}: INTERRUPTED`));

  // UTP: every call answered, success or (a call the killed worker held) executor_lost; none ran twice.
  const byStatus: Record<string, number> = {};
  for (const r of utp) {
    assert.ok(r.ok, JSON.stringify(r));
    byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
    if (r.status !== 'success') assert.equal(r.content.error?.code, 'executor_lost', JSON.stringify(r.content));
  }
  const utpRuns = readFileSync(runsFile, 'utf8').trim().split('\n').map((l) => l.split(' '));
  assert.equal(new Set(utpRuns.map((r) => r[1])).size, utpRuns.length, 'no UTP call ran twice');
  const lost = utp.filter((r) => r.ok && r.status !== 'success').map((r) => r.toolCallId);
  assert.ok(lost.length >= 1, 'the killed worker had a call under way');
  // A lost call is one the killed worker had claimed: it ran there (and nowhere else), or not at all.
  for (const id of lost) assert.ok(utpRuns.every(([pid, call]) => call !== id || Number(pid) === utpVictim), `${id}: lost, and never run by the live worker`);

  // The audit log: intact with all these writers; one `executed` record per finished run, none twice.
  const v = airlock(['audit', 'verify', '--workspace', wsDir]);
  assert.equal(v.code, 0, v.stdout + v.stderr);
  const executed = openAuditLog(ws.auditFile).show().filter((r) => r.type === 'executed');
  const sandboxIds = executed.map((r) => r.sandbox_id);
  assert.equal(new Set(sandboxIds).size, sandboxIds.length, 'no sandbox run recorded twice');
  const requestIds = executed.map((r) => r.request_id).filter(Boolean);
  assert.equal(new Set(requestIds).size, requestIds.length, 'no request executed twice');
  // Each finished run has its audit record; each killed one has a run folder without a record.json.
  // The audit record is written first: a process killed between the two leaves an audited run whose
  // folder has no record.json (at most one per killed process), never a finished run the log misses.
  const runDirs = readdirSync(ws.runs);
  const finished = runDirs.filter((d) => existsSync(join(ws.runs, d, 'record.json')));
  assert.deepEqual(finished.filter((d) => !sandboxIds.includes(d)), [], 'a finished run the audit log does not name');
  const auditedOnly = sandboxIds.filter((id) => !finished.includes(id as string));
  assert.ok(auditedOnly.length <= 3, `audited runs without a record.json: ${auditedOnly.join(', ')}`);
  const unfinished = runDirs.filter((d) => !finished.includes(d));
  // A lost call that ran in the killed worker may have finished its run (record.json written) before
  // the kill came, and not yet committed its answer: the caller then gets executor_lost for a run
  // that is on record (at most once, not exactly once). Once in a fresh-clone run: 147 for 146.
  const lostRan = lost.filter((id) => utpRuns.some(([, call]) => call === id)).length;
  const answeredRuns = RUNS - 1 + (RUNS - 1) + (byStatus.success ?? 0) + 1; // CLI + gate + UTP successes + the last run
  assert.ok(finished.length >= answeredRuns && finished.length <= answeredRuns + lostRan, `finished runs: ${finished.length}, answered: ${answeredRuns}, lost UTP calls that ran: ${lostRan}`);
  // Every other folder is the killed CLI run, the gate's killed run, or a lost call's run that did not finish.
  assert.ok(unfinished.length >= 2 && finished.length + unfinished.length <= answeredRuns + 2 + lostRan, `unfinished runs: ${unfinished.length}, lost UTP calls that ran: ${lostRan}`);

  // Nothing of any run is left: no mount below the shared TMPDIR, no cgroup of these processes, no staging folder.
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4] ?? '');
  assert.deepEqual(mounts.filter((m) => m.startsWith(`${top}/`)), [], 'no mount left');
  const groups: string[] = [];
  for (const m of new Set(Object.values(caps.cgroup.mounts))) {
    for (const n of existsSync(join(m, 'airlock')) ? readdirSync(join(m, 'airlock')) : []) {
      const owner = tagOwner(n);
      if (owner && pids.has(owner.pid)) groups.push(join(m, 'airlock', n));
    }
  }
  assert.deepEqual(groups, [], 'no cgroup left');
  assert.deepEqual(readdirSync(tmp), [], 'no staging or temporary folder left in the shared TMPDIR');
  process.stdout.write(`# ${JSON.stringify({ runs: finished.length, unfinished: unfinished.length, utp: byStatus, seconds: elapsed })}\n`);
});
