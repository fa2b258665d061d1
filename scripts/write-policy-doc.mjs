// Writes docs/policy.md from the compiled policy schema (run `npm run build` first).
import { writeFileSync } from 'node:fs';
import { policyDoc } from '../dist/src/policy/doc.js';

writeFileSync(new URL('../docs/policy.md', import.meta.url), policyDoc());
console.log('docs/policy.md');
