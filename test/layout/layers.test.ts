import { test } from 'node:test';
import assert from 'node:assert/strict';
import { importCycles, layerViolations, readSources } from './layers.js';
import { repoPath } from '../helpers/paths.js';

const tree = readSources(repoPath('src'));

test('the core imports no adapter and no front door document; base imports nothing of ours', () => {
  assert.ok(tree.size > 100, `read ${tree.size} source files`);
  assert.deepEqual(layerViolations(tree), []);
});

test('the layering rule catches a deliberately bad import', () => {
  const bad = new Map(tree);
  bad.set('judge/shortcut.ts', "import { renderToolResult } from '../gates/tool-result-render.js';\nimport type { ToolRequest } from '../contracts/tool-request.js';\n");
  bad.set('base/leak.ts', "import { judge } from '../judge/judge.js';\n");
  bad.set('host/peek.ts', "export { openStore } from '../store/open.js';\n");
  const found = layerViolations(bad).map((v) => `${v.from} -> ${v.to}`);
  assert.deepEqual(found.sort(), ['base/leak.ts -> judge/judge.ts', 'host/peek.ts -> store/open.ts', 'judge/shortcut.ts -> contracts/tool-request.ts', 'judge/shortcut.ts -> gates/tool-result-render.ts']);
});

test('no import cycles', () => {
  assert.deepEqual(importCycles(tree), []);
  const looped = new Map(tree);
  looped.set('pipeline/a.ts', "import { b } from './b.js';\n");
  looped.set('pipeline/b.ts', "import { a } from './a.js';\n");
  assert.deepEqual(importCycles(looped), [['pipeline/a.ts', 'pipeline/b.ts', 'pipeline/a.ts']]);
});
