import { PostgresStore } from '../../src/store/postgres.js';
import { disposePostgres, freshPostgres, PG_URL } from './services.js';
import { storeSuite } from './suite.js';

storeSuite('PostgreSQL', async () => {
  const store = await freshPostgres();
  return {
    store,
    peer: async () => {
      const p = new PostgresStore(PG_URL, { schema: store.schema });
      await p.init();
      return p;
    },
    dispose: () => disposePostgres(store),
  };
});
