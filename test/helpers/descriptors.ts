import { randomUUID } from 'node:crypto';

/** A valid FILE_DELETE of `<root>/**\/*.log` (recursive scope `root`); `over` replaces top-level fields. */
export function descriptor(root: string, over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    descriptor_version: '1.0',
    action_id: randomUUID(),
    created_at: '2026-11-22T09:30:00Z',
    created_by: 'ai',
    intent_summary: 'Test action.',
    action_type: 'FILE_DELETE',
    risk_level: 'MEDIUM',
    scope: { filesystem: { paths: [root], recursive: true }, network: { required: false }, ui: { required: false } },
    resources: { max_cpu_ms: 20000, max_memory_mb: 256, max_disk_mb: 64, max_duration_ms: 60000 },
    preconditions: {},
    effects: { filesystem: { create: [], modify: [], delete: [`${root}/**/*.log`] }, network: false, system_state_change: false },
    sandbox: { required: true, sandbox_type: 'namespace', allow_network: false, max_runs: 1 },
    rollback: { supported: true, rollback_type: 'filesystem_snapshot', rollback_scope: 'declared_effects_only' },
    confirmation: { required: false, reason: '', cooldown_on_repeat: false },
    audit: { log: true, log_level: 'SUMMARY', retain_days: 30 },
    ...over,
  };
}
