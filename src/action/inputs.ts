import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Problem } from '../base/problem.js';

/** Every declared input is a regular file in `dir` whose sha256 is the declared one. */
export function checkInputs(inputs: { name: string; sha256: string }[], dir: string): Problem[] {
  const problems: Problem[] = [];
  for (const input of inputs) {
    const p = join(dir, input.name);
    if (!existsSync(p)) {
      problems.push({ code: 'RUN_INPUT_MISSING', message: `input ${input.name} is not in ${dir}`, path: `inputs.${input.name}` });
      continue;
    }
    if (!lstatSync(p).isFile()) {
      problems.push({ code: 'RUN_INPUT_NOT_FILE', message: `input ${p} is not a regular file`, path: `inputs.${input.name}` });
      continue;
    }
    const actual = createHash('sha256').update(readFileSync(p)).digest('hex');
    if (actual !== input.sha256) {
      problems.push({ code: 'RUN_INPUT_HASH_MISMATCH', message: `input ${input.name} has sha256 ${actual}, the request declares ${input.sha256}`, path: `inputs.${input.name}` });
    }
  }
  return problems;
}
