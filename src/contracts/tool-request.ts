import type { Contract } from './problem.js';

// STUB: replaced by the real contract module.
export const toolRequestContract: Contract<unknown> = {
  kind: 'tool-request',
  detect: () => false,
  parse: () => ({ ok: false, problems: [{ code: 'NOT_BUILT', message: 'tool-request is not built yet' }] }),
  render: () => '',
  rules: [],
  schemas: {},
};
