import type { Contract } from './problem.js';

// STUB: replaced by the real contract module.
export const utpContract: Contract<unknown> = {
  kind: 'utp',
  detect: () => false,
  parse: () => ({ ok: false, problems: [{ code: 'NOT_BUILT', message: 'utp is not built yet' }] }),
  render: () => '',
  rules: [],
  schemas: {},
};
