// Writes docs/contracts.md from the compiled rule registry (run `npm run build` first).
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { contractsDoc } from '../dist/src/contracts/rules-doc.js';

const root = new URL('../', import.meta.url).pathname;
const files = {};
const walk = (dir) => {
  for (const n of readdirSync(dir)) {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) walk(p);
    else if (n.endsWith('.test.ts')) files[relative(root, p)] = readFileSync(p, 'utf8');
  }
};
walk(join(root, 'test'));
writeFileSync(join(root, 'docs/contracts.md'), contractsDoc(files));
console.log('docs/contracts.md');
