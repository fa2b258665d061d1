// Writes schemas/*.schema.json from the compiled contracts (run `npm run build` first).
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { publishedSchemas, schemaFileName } from '../dist/src/contracts/json-schema.js';

const dir = new URL('../schemas/', import.meta.url).pathname;
mkdirSync(dir, { recursive: true });
for (const f of readdirSync(dir)) if (f.endsWith('.schema.json')) rmSync(dir + f);
for (const [name, schema] of Object.entries(publishedSchemas())) {
  writeFileSync(dir + schemaFileName(name), JSON.stringify(schema, null, 2) + '\n');
  console.log(`schemas/${schemaFileName(name)}`);
}
