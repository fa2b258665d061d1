// Starts the bundled CLI with a V8 code cache beside it (written on first use, refreshed when
// V8 rejects it), which is most of the start-up time of a short command like `airlock check`.
'use strict';
const { readFileSync, writeFileSync, renameSync } = require('node:fs');
const { createRequire, wrap } = require('node:module');
const { join } = require('node:path');
const { Script } = require('node:vm');

const file = join(__dirname, 'airlock.cjs');
const cacheFile = `${file}.v8cache`;
let cachedData;
try {
  cachedData = readFileSync(cacheFile);
} catch {
  cachedData = undefined;
}
const script = new Script(wrap(readFileSync(file, 'utf8')), { filename: file, cachedData, importModuleDynamically: (s) => import(s) });
const mod = { exports: {}, filename: file, id: file };
script.runInThisContext()(mod.exports, createRequire(file), mod, file, __dirname);
if (cachedData === undefined || script.cachedDataRejected) {
  // After the command ran, the cache also holds the functions it compiled lazily.
  process.once('beforeExit', () => {
    try {
      const tmp = `${cacheFile}.${process.pid}`;
      writeFileSync(tmp, script.createCachedData());
      renameSync(tmp, cacheFile);
    } catch {
      /* a read-only install just starts without a cache */
    }
  });
}
