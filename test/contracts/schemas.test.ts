import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { publishedSchemas, schemaFileName } from '../../src/contracts/json-schema.js';
import { repoPath } from '../helpers/paths.js';

test('schemas/ holds exactly the JSON Schemas derived from the contracts (run `npm run schemas` after changing a contract)', () => {
  const generated = publishedSchemas();
  const onDisk = readdirSync(repoPath('schemas')).filter((f) => f.endsWith('.schema.json')).sort();
  assert.deepEqual(onDisk, Object.keys(generated).map(schemaFileName).sort());
  for (const [name, schema] of Object.entries(generated)) {
    const file = JSON.parse(readFileSync(repoPath('schemas', schemaFileName(name)), 'utf8'));
    assert.deepEqual(file, schema, `schemas/${schemaFileName(name)} is stale`);
  }
});
