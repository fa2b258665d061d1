// Opening one SQLite file from several processes at once, the first time included (a new workspace
// used by a gate, a worker and CLI runs together): wait for locks instead of failing on them, switch
// to WAL, and create the schema in one transaction (one writer at a time: the others wait or retry,
// then find the tables there).
import Database from 'better-sqlite3';

const pause = new Int32Array(new SharedArrayBuffer(4));

/** Runs `fn`, again for up to ~5 s while SQLite answers SQLITE_BUSY (a pragma the busy handler does not cover). */
function whileBusy<T>(fn: () => T): T {
  for (let i = 0; ; i++) {
    try {
      return fn();
    } catch (e) {
      if (!/^SQLITE_BUSY/.test(String((e as { code?: unknown }).code)) || i >= 100) throw e;
      Atomics.wait(pause, 0, 0, 50);
    }
  }
}

export function openSqliteFile(file: string, opts: { synchronous: 'NORMAL' | 'FULL'; schema: string }): Database.Database {
  const db = new Database(file);
  try {
    // First: several processes may open (and create) the file at once; switching to WAL locks it.
    db.pragma('busy_timeout = 5000');
    whileBusy(() => db.pragma('journal_mode = WAL'));
    db.pragma(`synchronous = ${opts.synchronous}`);
    // Deferred, not IMMEDIATE: on a file whose tables exist the statements are no-ops that take no
    // write lock (a CLI opening a busy store does not queue behind its writers); creating them upgrades
    // to a write, and a lost race (SQLITE_BUSY_SNAPSHOT) is retried: the next try finds them.
    whileBusy(() => db.transaction(() => db.exec(opts.schema))());
    return db;
  } catch (e) {
    db.close();
    throw e;
  }
}
