import type { Contract } from './problem.js';

// STUB: replaced by the real contract module.
export const actionDescriptorContract: Contract<unknown> = {
  kind: 'action-descriptor',
  detect: () => false,
  parse: () => ({ ok: false, problems: [{ code: 'NOT_BUILT', message: 'action-descriptor is not built yet' }] }),
  render: () => '',
  rules: [],
  schemas: {},
};
