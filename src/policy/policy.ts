import { LineCounter, parseDocument } from 'yaml';
import * as z from 'zod';
import type { Problem, Result } from '../base/problem.js';
import { yamlOffsetOf } from '../contracts/yaml-lines.js';

/**
 * The host's policy (WORKSPACE/policy.yaml): the host's word on what may run. Requests that ask for
 * more than it allows are rejected with the rule that stopped them; nothing is silently clamped.
 */
const positive = z.number().positive();
const int = z.number().int().positive();
const riskAction = z.enum(['allow', 'require_confirmation', 'block']);

/*
 * Every key carries its meaning (`.describe`): docs/policy.md is generated from this schema
 * (`npm run docs:policy`, src/policy/doc.ts), and a test fails when the committed page drifts.
 */
export const policySchema = z.strictObject({
  version: z.literal(1).describe('The policy format. Always 1.'),
  limits: z.strictObject({
    cpu_cores: positive.describe('CPU cores a run may ask for.'),
    memory_mb: int.describe('Memory of the whole sandbox, in MB (cgroup limit).'),
    time_sec: positive.describe('Wall time of one run, in seconds.'),
    pids: int.describe('Processes and threads alive at once in the sandbox.'),
    out_mb: int.describe('Bytes a run may write to /out and its scopes\' overlay layers, in MB (the disk limit).'),
    stdout_kb: int.describe('stdout and stderr the host keeps of a run, in KB each; the rest is counted and hashed.'),
    files: int.default(50_000).describe('Entries (files, folders, links) a run may leave in /out and its scopes, and in /tmp with /dev/shm.'),
  }).describe('Host maxima for every limit a request, descriptor, UTP tool or `airlock exec` may ask for. Asking for more is refused with the rule (`POLICY_LIMIT ... (rule limits.memory_mb)`), never clamped.'),
  languages: z.array(z.enum(['python', 'node', 'ts', 'go', 'ruby'])).describe('Languages a Tool Request may declare.'),
  lanes: z.array(z.enum(['ns', 'monty'])).min(1).describe('Sandbox lanes that may run: `ns` (bubblewrap) and `monty` (the Monty Python interpreter). At least one.'),
  network: z.strictObject({
    allow: z.boolean().describe('Whether any run may have the network at all (through the host proxy).'),
    allowlist: z.array(z.string().min(1)).describe('Destinations a run may reach: `host`, `host:port`, `*.domain`, an IP or CIDR range with an optional port (see docs/network.md). Loopback, private and metadata addresses are reachable only when listed here. Must be empty when `allow` is false.'),
  }).describe('The network ceiling: a request\'s allowlist is intersected with it, so it can narrow it, never widen it.'),
  approval: z.strictObject({
    expiry_hours: positive.describe('Hours an operator\'s signature on a request stays valid (`APPROVAL_EXPIRED` after).'),
    auto_approve: z.strictObject({
      monty_without_inputs: z.boolean().describe('The policy itself approves Monty-lane requests with no inputs (no person needed).'),
    }).describe('Requests the policy may approve without a person.'),
  }).describe('Signed approval of requests by operators.'),
  risk: z.strictObject({
    low: riskAction.describe('What a LOW risk declaration needs.'),
    medium: riskAction.describe('What a MEDIUM risk declaration needs.'),
    high: riskAction.describe('What a HIGH risk declaration needs.'),
    critical: riskAction.describe('What a CRITICAL risk declaration needs.'),
  }).describe('What each declared risk level needs: `allow`, `require_confirmation` (a person signs the diff before promotion) or `block` (never runs).'),
  operators: z.array(
    z.strictObject({
      name: z.string().regex(/^[a-z0-9][a-z0-9._-]{0,63}$/).describe('The operator\'s name: lowercase letters, digits, `.`, `_`, `-`.'),
      public_key: z.string().regex(/^ed25519:[A-Za-z0-9+/]{43}=$/).describe('`ed25519:<base64 of the 32-byte raw public key>`.'),
    }),
  ).describe('Operators whose Ed25519 signatures the gate trusts; filled by `airlock keygen --operator NAME`. Each name once.'),
  confirmation: z.strictObject({
    cooldown_seconds: int.describe('After a rollback, the same declaration (when it asks for `cooldown_on_repeat`) waits this long before it may be promoted again.'),
  }).describe('Promotion after a person\'s confirmation.'),
  retention: z.strictObject({
    audit_days: int.describe('Days audit records are kept (older ones pruned when `airlock serve` starts; the chain stays verifiable).'),
    artifacts_days: int.describe('Days run folders (runs/) and their artifacts are to be kept. Not enforced yet: nothing prunes runs/ today.'),
    tombstones_days: int.describe('Days pre-images of deleted or overwritten files (tombstones/) are kept; older ones are removed by `airlock recover --prune-tombstones` (those of live promotions stay: rollback needs them).'),
  }).describe('How long the workspace keeps what it records.'),
  scope_roots: z
    .array(z.string().regex(/^(\/[^/\0]+)+$/, 'an absolute path without a trailing slash').refine((p) => !p.split('/').some((c) => c === '.' || c === '..'), 'a normalised path (no . or ..)'))
    .default([])
    .describe('Folders under which an action\'s scope (and `airlock exec --ro/--rw`) may lie: absolute, normalised, no symbolic links. Empty (or absent, in a policy written before it existed): no action may touch a real file. Not under /tmp, /usr, /etc or the sandbox\'s other mounts (refused at run time). Promotion writes as each scope\'s owner.'),
  tool_registrations: z
    .record(
      z.string().regex(/^[^/\s]+\/[^/\s]+$/, '`<project_id>/<tool_name>`'),
      z.string().refine((s) => Number.isFinite(Date.parse(s)), 'an ISO 8601 time (the signed_utc `airlock tools add` printed)'),
    )
    .default({})
    .describe('UTP: per tool (`<project_id>/<tool_name>`), the oldest registration its workers may serve: a signed row from before that time is refused (`UTPS_TOOL_ROLLBACK`), though this workspace never served the newer one. `airlock tools add`, `sign` and `retire` print the line to pin. Absent: a workspace refuses only rows older than one it has served.'),
});

export type Policy = z.infer<typeof policySchema>;

export const policyRules = [
  { code: 'POLICY_YAML', spec: 'policy.yaml is valid YAML with each key once.', fix: 'Fix the YAML at the line given.' },
  { code: 'POLICY_FIELD', spec: 'policy.yaml has every field of the policy, with the right type and nothing unknown.', fix: 'Compare with the policy `airlock init` writes; the message names the field.' },
  { code: 'POLICY_OPERATOR_DUPLICATE', spec: 'Each operator name appears once.', fix: 'Remove or rename the duplicate operator.' },
  { code: 'POLICY_NETWORK', spec: 'A network allowlist ceiling is given only when network.allow is true.', fix: 'Set network.allow: true, or empty the allowlist.' },
] as const;

/** The policy `airlock init` writes: nothing risky is allowed without a person. */
export const DEFAULT_POLICY_YAML = `# Airlock host policy: the host's word on what may run. Requests asking for more are rejected,
# never clamped. Check it with \`airlock policy check\`.
version: 1
limits:              # host maxima for every limit a request may ask for
  cpu_cores: 2
  memory_mb: 2048
  time_sec: 300
  pids: 128          # processes + threads alive at once
  out_mb: 256        # bytes a run may write to /out
  stdout_kb: 1024    # stdout/stderr kept by the host
  files: 50000       # entries (files, folders, links) a run may leave in /out + its scopes, and in /tmp + /dev/shm
languages: [python, node]
lanes: [ns, monty]
network:             # the ceiling: a request cannot widen it
  allow: false
  allowlist: []
approval:
  expiry_hours: 24   # an operator's signature is valid this long
  auto_approve:      # requests the policy may approve without a person
    monty_without_inputs: true
risk:                # what each declared risk level needs
  low: allow
  medium: allow
  high: require_confirmation
  critical: block
operators: []        # filled by \`airlock keygen --operator NAME\`
scope_roots: []      # folders under which an action may act (its declared scope), e.g. [/srv/app, /home/alice/work];
                     # empty: no action may touch a real file. Promotion writes as each scope's owner.
confirmation:
  cooldown_seconds: 3600   # after a rollback, the same action waits this long before it may be promoted again
retention:
  audit_days: 365
  artifacts_days: 30
  tombstones_days: 30
`;

/** Parses policy.yaml text into a Policy or coded problems with lines. */
export function parsePolicy(text: string): Result<Policy> {
  const counter = new LineCounter();
  let doc;
  try {
    // logLevel error: an odd key (a collection) is reported as POLICY_FIELD, not printed as a process warning.
    doc = parseDocument(text, { lineCounter: counter, uniqueKeys: true, prettyErrors: false, schema: 'core', logLevel: 'error' });
  } catch (e) {
    return { ok: false, problems: [{ code: 'POLICY_YAML', message: (e as Error).message, line: 1 }] };
  }
  if (doc.errors.length > 0) {
    return { ok: false, problems: doc.errors.map((e) => ({ code: 'POLICY_YAML', message: e.message.split('\n')[0] ?? 'YAML error', line: counter.linePos(e.pos[0]).line })) };
  }
  const lineOf = (path: (string | number)[]): number => counter.linePos(yamlOffsetOf(doc.contents, path)).line;
  const r = policySchema.safeParse(doc.toJS({ maxAliasCount: 0 }));
  if (!r.success) {
    return {
      ok: false,
      problems: r.error.issues.map((i) => ({
        code: 'POLICY_FIELD',
        message: `${i.path.join('.') || 'policy'}: ${i.message}`,
        path: i.path.join('.'),
        line: lineOf(i.path as (string | number)[]),
      })),
    };
  }
  const p = r.data;
  const problems: Problem[] = [];
  const names = p.operators.map((o) => o.name);
  names.forEach((n, i) => {
    if (names.indexOf(n) !== i) problems.push({ code: 'POLICY_OPERATOR_DUPLICATE', message: `operator ${n} is listed twice`, path: `operators.${i}`, line: lineOf(['operators', i]) });
  });
  if (!p.network.allow && p.network.allowlist.length > 0) {
    problems.push({ code: 'POLICY_NETWORK', message: 'network.allowlist is set but network.allow is false', path: 'network.allowlist', line: lineOf(['network', 'allowlist']) });
  }
  return problems.length > 0 ? { ok: false, problems } : { ok: true, value: p };
}
