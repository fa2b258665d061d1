import type { Contract } from './problem.js';

// STUB: replaced by the real contract module.
export const sandboxResultContract: Contract<unknown> = {
  kind: 'sandbox-result',
  detect: () => false,
  parse: () => ({ ok: false, problems: [{ code: 'NOT_BUILT', message: 'sandbox-result is not built yet' }] }),
  render: () => '',
  rules: [],
  schemas: {},
};
