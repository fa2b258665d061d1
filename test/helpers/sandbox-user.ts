// The host uid a root Airlock's sandboxes run as here: Airlock's own user, which scripts/setup.sh
// makes (airlock setup --sandbox-user). The tests that check where sandboxes run compare with it.
import assert from 'node:assert/strict';
import { hostSandboxUser, type SandboxHostUser } from '../../src/sandbox/sandbox-user.js';

export function dedicatedSandboxUser(): SandboxHostUser {
  const u = hostSandboxUser();
  assert.ok(u?.dedicated, `sandboxes run as ${u ? `the shared ${u.name} (${u.shared})` : 'no user'}: run ./scripts/setup.sh (or airlock setup --sandbox-user) as root first`);
  return u;
}
