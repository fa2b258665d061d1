import type { Contract } from './problem.js';

// STUB: replaced by the real contract module.
export const toolResultContract: Contract<unknown> = {
  kind: 'tool-result',
  detect: () => false,
  parse: () => ({ ok: false, problems: [{ code: 'NOT_BUILT', message: 'tool-result is not built yet' }] }),
  render: () => '',
  rules: [],
  schemas: {},
};
