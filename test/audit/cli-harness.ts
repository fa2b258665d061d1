// Runs `airlock audit ...` through registerAuditCommands, configured as src/cli/main.ts configures
// its program (exit code 2 for usage errors: bad input), until main.ts registers the commands itself.
import { Command } from 'commander';
import { registerAuditCommands } from '../../src/cli/commands/audit.js';

const program = new Command();
program.name('airlock');
program.exitOverride((err) => {
  process.exit(err.exitCode === 0 ? 0 : 2);
});
registerAuditCommands(program);
await program.parseAsync(process.argv);
