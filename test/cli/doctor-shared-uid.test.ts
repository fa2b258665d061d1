// The sandbox's host user is shared with the host's `nobody`: another process running as it could
// reach live runs' /out and scope folders as the sandbox can. `airlock doctor` names such processes.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { airlock } from '../helpers/cli.js';

test('airlock doctor warns about other processes running as the sandbox\'s host user, and only then', { skip: process.getuid?.() !== 0 ? 'needs root (the sandbox runs as nobody)' : false }, async () => {
  const quiet = airlock(['doctor']);
  const other = spawn('/bin/sleep', ['30'], { uid: 65534, gid: 65534, stdio: 'ignore' });
  try {
    await new Promise((r) => setTimeout(r, 100)); // it has exec'd
    const loud = airlock(['doctor']);
    assert.match(loud.stdout, new RegExp(`\\n +WARNING: [0-9]+ other process\\(es\\) run as uid 65534 \\([^)]*${other.pid} sleep[^)]*\\): they can reach live runs' /out and scope folders`), loud.stdout);
    // Without it (on a host where nothing else runs as nobody), the line says so.
    if (!/WARNING/.test(quiet.stdout)) assert.match(quiet.stdout, /\nsandbox uid +host nobody \(65534\); uid 65534 inside: no other process runs as it now\n/, quiet.stdout);
  } finally {
    other.kill('SIGKILL');
  }
});
