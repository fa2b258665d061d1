// npm run bench:log — the services' JSON log (src/base/json-log.ts): CPU per line written to a pipe
// in 4 KB blocks (the services' stdout) against one write per line (pino's default destination),
// with no log as the baseline. One process, rounds of 500 event-loop turns (one line per turn, as a
// service logs one line per call) alternated between the three; run it as `node bench/log.mjs | cat
// > /dev/null` (npm's script does) so stdout is a pipe.
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { jsonLog } from '../dist/src/base/json-log.js';
import { fmt } from './stats.mjs';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 12);
const TURNS = 500;
const fields = { agent_turn_id: 'turn-7b2c1d9e-1f7a-4b8e-9c3d-2a1b0c9d8e7f', tool_call_id: 'call-0f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f', status: 'success', card_id: 'card-result-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d' };
const variants = {
  none: null,
  'a write per line': jsonLog('airlock-utp', pino.destination({ dest: 1, sync: false })),
  'blocks (the services)': jsonLog('airlock-utp'),
};
const cpuUs = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
for (let round = 0; round < ROUNDS + 2; round++) {
  for (const [name, log] of Object.entries(variants)) {
    await sleep(150); // the previous variant's writes are over
    const c0 = process.cpuUsage();
    for (let i = 0; i < TURNS; i++) {
      log?.write('info', 'answered', fields);
      await sleep(0);
    }
    const c = process.cpuUsage(c0);
    if (round >= 2) cpuUs[name].push((c.user + c.system) / TURNS); // two rounds of warm-up
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const [none, perLine, blocks] = Object.values(cpuUs).map(median);
const out = process.stderr; // stdout is the log's pipe
out.write(`CPU per event-loop turn, median of ${ROUNDS} rounds of ${TURNS} (us): no log ${fmt(none, 1)}, a write per line ${fmt(perLine, 1)}, blocks ${fmt(blocks, 1)}\n`);
out.write(`CPU per line: a write per line ${fmt(perLine - none, 1)} us, blocks ${fmt(blocks - none, 1)} us; blocks / a write per line ${fmt((blocks - none) / (perLine - none), 2)}\n`);
process.exit(0);
