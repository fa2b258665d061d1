import * as z from 'zod';
import { contracts } from './index.js';

/**
 * The JSON Schemas published under schemas/, derived from the same zod schemas the TypeScript
 * types come from, so the two cannot drift (test/contracts/schemas.test.ts compares the files).
 */
export function publishedSchemas(): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const c of contracts) {
    for (const [name, schema] of Object.entries(c.schemas)) {
      out[name] = {
        $id: `https://airlock.dev/schemas/${name}.schema.json`,
        ...z.toJSONSchema(schema, { target: 'draft-2020-12', unrepresentable: 'any' }),
      };
    }
  }
  return out;
}

export const schemaFileName = (name: string): string => `${name}.schema.json`;
