import { Command, InvalidArgumentError } from 'commander';
import { checkExitCode, checkFile, explain, formatReport } from './check.js';

const program = new Command();
program.name('airlock').description('The host between AI agents and the world.').version('0.1.0');
// Exit code 3 for usage errors and internal errors: 2 means "a document was invalid".
program.exitOverride((err) => {
  process.exit(err.exitCode === 0 ? 0 : 3);
});

program
  .command('check')
  .description('validate documents (TR-*.md, TS-*.md, Action Descriptors, Sandbox Results, UTP payloads)')
  .argument('[files...]', 'documents to check')
  .option('--json', 'print a machine-readable report')
  .option('--explain <code>', 'explain a rule code and how to fix a document that breaks it')
  .action(async (files: string[], opts: { json?: boolean; explain?: string }) => {
    if (opts.explain) {
      const text = explain(opts.explain);
      if (!text) {
        process.stderr.write(`unknown rule code ${opts.explain}; see docs/contracts.md for the list\n`);
        process.exitCode = 3;
        return;
      }
      process.stdout.write(text);
      return;
    }
    if (files.length === 0) throw new InvalidArgumentError('give at least one file to check');
    const reports = await Promise.all(files.map(checkFile));
    if (opts.json) process.stdout.write(JSON.stringify({ valid: reports.every((r) => r.valid), files: reports }, null, 2) + '\n');
    else for (const r of reports) process.stdout.write(formatReport(r));
    process.exitCode = checkExitCode(reports);
  });

program
  .command('run')
  .description('validate a Tool Request (TR-*.md) or Action Descriptor (.json), run it once in the sandbox, observe and judge it')
  .argument('<file>', 'the request or descriptor')
  .option('--inputs <dir>', 'folder holding the declared input files (default: the file\'s folder)')
  .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
  .option('--json', 'print the Sandbox Result JSON on stdout')
  .action(async (file: string, opts: { inputs?: string; workspace?: string; json?: boolean }) => {
    const { runCommand } = await import('./run.js');
    process.exitCode = await runCommand(file, opts);
  });

program
  .command('doctor')
  .description('print what this host can enforce for the sandbox, and which limits will only be reported')
  .option('--json', 'print the capabilities as JSON')
  .action(async (opts: { json?: boolean }) => {
    const { doctorCommand } = await import('./doctor.js');
    process.exitCode = await doctorCommand(opts);
  });

try {
  await program.parseAsync(process.argv);
} catch (e) {
  process.stderr.write(`airlock: internal error: ${(e as Error).stack ?? e}\n`);
  process.exitCode = 3;
}
