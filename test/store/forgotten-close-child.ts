import { PostgresStore } from '../../src/store/postgres.js';

// A program that uses a PostgreSQL store and never closes it (argv: URL, schema): it must still end.
const store = new PostgresStore(process.argv[2] ?? '', { schema: process.argv[3] ?? '' });
await store.init();
await new Promise((r) => setTimeout(r, 100)); // the held connections are taken meanwhile
// A statement on one held connection; the other (the relaxed pool's) is held and never used.
await store.getCard('none');
process.stdout.write('used\n');
