import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { actionFromToolRequest } from '../../src/action/from-tool-request.js';
import { checkText } from '../../src/contracts/index.js';
import type { ToolRequest } from '../../src/contracts/tool-request.js';
import { ownerStamp, ownerTag } from '../../src/base/owner.js';
import { listRuns } from '../../src/host/runs.js';
import { runAction } from '../../src/pipeline/run.js';
import { keepRunFoldersReady, READY_DEPTH } from '../../src/pipeline/run-folder.js';
import { openWorkspace, type Workspace } from '../../src/workspace/workspace.js';
import { writeRequest } from '../helpers/requests.js';
import { scopedWorkspace } from '../helpers/workspace.js';

// A folder made ahead, once its files are made too.
const ready = (ws: Workspace) => readdirSync(ws.runs).filter((n) => n.startsWith('.ready-') && existsSync(join(ws.runs, n, 'sandbox-result.json.partial')));
const until = async (what: string, ok: () => boolean) => {
  for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(ok(), what);
};

async function run(ws: Workspace, program: string) {
  const req = writeRequest({ slug: 'ready', command: 'python3 a.py', inputs: { 'a.py': program } });
  const checked = checkText(basename(req.file), readFileSync(req.file, 'utf8'));
  assert.equal(checked.problems.length, 0);
  const r = await runAction(actionFromToolRequest(checked.value as ToolRequest), { workspace: ws, inputsDir: req.dir });
  assert.equal(r.kind, 'ran');
  if (r.kind !== 'ran') throw new Error('not ran');
  return r;
}

test('a service keeps run folders made ahead: the next run takes one, its result is whole, and none is listed as a run', async (t) => {
  const ws = openWorkspace(scopedWorkspace().root);
  keepRunFoldersReady(true);
  t.after(() => keepRunFoldersReady(false));
  const first = await run(ws, 'print(1)\n');
  assert.deepEqual(readdirSync(first.runDir), ['sandbox-result.json'], 'a run that left /out empty has no out/ folder');
  await until(`${READY_DEPTH} folders are made ahead after the first run`, () => ready(ws).length === READY_DEPTH);
  const spares = ready(ws);
  for (const spare of spares) {
    assert.match(spare, new RegExp(`^\\.ready-${ownerTag().replace('.', '\\.')}-[0-9a-f]{8}$`), 'its name says which process made it');
    assert.deepEqual(readdirSync(join(ws.runs, spare)), ['sandbox-result.json.partial']);
    assert.equal(readFileSync(join(ws.runs, spare, 'sandbox-result.json.partial'), 'utf8'), `${ownerStamp()}\n`, 'it says whose it is');
  }
  assert.deepEqual(listRuns(ws, 10).map((r) => r.sandbox_id), [first.sandboxId], 'a folder made ahead is not a run');

  const second = await run(ws, 'open("/out/two", "w").write("22")\n');
  assert.equal(spares.filter((s) => !existsSync(join(ws.runs, s))).length, 1, 'the second run took one folder made ahead');
  assert.deepEqual(readdirSync(second.runDir).sort(), ['out', 'sandbox-result.json'], 'no partial file is left');
  assert.deepEqual(readdirSync(join(second.runDir, 'out')), ['two'], 'its /out holds only its own files');
  assert.equal(JSON.parse(readFileSync(second.sandboxResultFile, 'utf8')).sandbox_id, second.sandboxId);
  assert.deepEqual(second.sandboxResult.filesystem_diff.added.map((e) => e.path), ['/out/two']);
  await until('the one taken is made again', () => ready(ws).length === READY_DEPTH && ready(ws).some((n) => !spares.includes(n)));

  keepRunFoldersReady(false);
  assert.deepEqual(readdirSync(ws.runs).filter((n) => n.startsWith('.ready-')), [], 'a service that stops removes its folders made ahead');
});

test("a service removes folders made ahead by a process that is gone, never a live process's", async (t) => {
  const ws = openWorkspace(scopedWorkspace().root);
  const gone = spawnSync('true').pid;
  const dead = `.ready-${gone.toString(36)}.x-deadbeef`;
  const live = `.ready-${ownerTag(1)}-0000beef`; // pid 1 lives as long as the machine
  for (const n of [dead, live]) {
    mkdirSync(join(ws.runs, n, 'out'), { recursive: true });
    writeFileSync(join(ws.runs, n, 'sandbox-result.json.partial'), '1 1\n');
  }
  keepRunFoldersReady(true);
  t.after(() => keepRunFoldersReady(false));
  await run(ws, 'print(1)\n');
  await until('a folder of its own is made ahead', () => ready(ws).some((n) => n.includes(ownerTag())));
  assert.equal(existsSync(join(ws.runs, dead)), false, 'the dead process\'s folder is swept');
  assert.equal(existsSync(join(ws.runs, live)), true, 'a live process\'s folder is kept');
  assert.equal(listRuns(ws, 10).length, 1, 'neither is listed as a run');
});

test('runs at once in a service: each result whole, in its own folder, and no more folders made ahead than the depth', async (t) => {
  const ws = openWorkspace(scopedWorkspace().root);
  keepRunFoldersReady(true);
  t.after(() => keepRunFoldersReady(false));
  await run(ws, 'print(0)\n');
  await until('folders are made ahead', () => ready(ws).length === READY_DEPTH);
  const rs = await Promise.all(Array.from({ length: 6 }, (_, i) => run(ws, `open("/out/f${i}", "w").write("${i}")\nprint(${i})\n`)));
  assert.equal(new Set(rs.map((r) => r.runDir)).size, 6);
  rs.forEach((r, i) => {
    assert.deepEqual(readdirSync(r.runDir).sort(), ['out', 'sandbox-result.json']);
    assert.deepEqual(readdirSync(join(r.runDir, 'out')), [`f${i}`]);
    assert.equal(JSON.parse(readFileSync(r.sandboxResultFile, 'utf8')).sandbox_id, r.sandboxId);
  });
  await until('as many folders made ahead as the depth, no more', () => ready(ws).length === READY_DEPTH);
  assert.equal(readdirSync(ws.runs).filter((n) => n.startsWith('.ready-')).length, READY_DEPTH);
});

test('a service that stops while a folder is being made ahead leaves none behind', async () => {
  const ws = openWorkspace(scopedWorkspace().root);
  keepRunFoldersReady(true);
  await run(ws, 'print(1)\n'); // its end starts making the next folder
  keepRunFoldersReady(false); // at once, while that is under way
  await until('nothing made ahead is left', () => readdirSync(ws.runs).every((n) => !n.startsWith('.ready-')));
});

test("attack: a dead owner's folder made ahead that is a link, or holds links, is removed without following them", async (t) => {
  const ws = openWorkspace(scopedWorkspace().root);
  const victim = mkdtempSync(join(tmpdir(), 'airlock-victim-'));
  writeFileSync(join(victim, 'keep.txt'), 'not yours');
  const gone = spawnSync('true').pid;
  const asLink = `.ready-${gone.toString(36)}.x-11111111`;
  const holdsLinks = `.ready-${gone.toString(36)}.x-22222222`;
  symlinkSync(victim, join(ws.runs, asLink));
  mkdirSync(join(ws.runs, holdsLinks));
  symlinkSync(victim, join(ws.runs, holdsLinks, 'out'));
  symlinkSync(join(victim, 'keep.txt'), join(ws.runs, holdsLinks, 'sandbox-result.json.partial'));
  keepRunFoldersReady(true);
  t.after(() => keepRunFoldersReady(false));
  await run(ws, 'print(1)\n'); // the service's first folder made ahead sweeps dead owners' first
  await until('its own folder is made ahead', () => ready(ws).some((n) => n.includes(ownerTag())));
  assert.equal(existsSync(join(ws.runs, asLink)), false, 'the link is gone');
  assert.equal(existsSync(join(ws.runs, holdsLinks)), false, 'the folder is gone');
  assert.deepEqual(readdirSync(victim), ['keep.txt'], 'nothing the links pointed at was touched');
  assert.equal(readFileSync(join(victim, 'keep.txt'), 'utf8'), 'not yours');
});
