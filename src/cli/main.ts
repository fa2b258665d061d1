import { Command, InvalidArgumentError, Option } from 'commander';
import { checkExitCode, checkFile, explain, formatReport } from './check.js';
import { registerAuditCommands } from './commands/audit.js';
import { registerCommitCommands } from './commands/commit.js';
import { registerUtpCommands } from './commands/utp.js';

const program = new Command();
program.name('airlock').description('The host between AI agents and the world.').version('0.1.0').enablePositionalOptions();
/** One meaning per exit status across commands (`airlock exec` keeps its own, documented in its help). */
const EXIT = { ok: 0, rejected: 2, internal: 3 } as const;
// A usage error (unknown option, missing argument, bad value) is bad input: 2, never "internal error".
program.exitOverride((err) => {
  process.exit(err.exitCode === 0 ? EXIT.ok : EXIT.rejected);
});
program.addHelpText(
  'after',
  `
Exit status, for every command but exec:
  0  done (a run that produced a result, whatever its verdict; a valid document)
  2  rejected or bad input: an invalid or unreadable document, a usage error, a request the
     policy or the approval refused, an unknown sandbox or action id, a person's "no"
  3  internal or sandbox error (a bug, the sandbox could not run, the audit log refused a write)
  130 interrupted (Ctrl-C)
airlock exec returns the program's own status, or 124 time limit, 125 nothing ran, 126 BLOCK,
127 command not found, 130 interrupted (airlock exec --help).`,
);

program
  .command('check')
  .description('validate documents (TR-*.md, TS-*.md, Action Descriptors, Sandbox Results, UTP payloads)')
  .argument('[files...]', 'documents to check')
  .option('--json', 'print a machine-readable report')
  .option('--explain <code>', 'explain a rule code and how to fix a document that breaks it')
  .action(async (files: string[], opts: { json?: boolean; explain?: string }) => {
    if (opts.explain) {
      const text = await explain(opts.explain);
      if (!text) {
        process.stderr.write(`unknown rule code ${opts.explain}; see docs/contracts.md (documents) and docs/utp-service.md (the UTP service) for the lists\n`);
        process.exitCode = EXIT.rejected;
        return;
      }
      process.stdout.write(text);
      return;
    }
    if (files.length === 0) {
      process.stderr.write('airlock check: give at least one file to check (airlock check FILE..., or --explain CODE)\n');
      process.exitCode = EXIT.rejected;
      return;
    }
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
  .option('--follow', 'show the program\'s stdout and stderr as they come')
  .action(async (file: string, opts: { inputs?: string; workspace?: string; json?: boolean; follow?: boolean }) => {
    const { runCommand } = await import('./run.js');
    process.exitCode = await runCommand(file, opts);
  });

const collect = (v: string, prev: string[] = []): string[] => [...prev, v];
const positive = (what: string) => (v: string): number => {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`${what} must be a positive number`);
  return n;
};
program
  .command('exec')
  .description('run a command once in the sandbox, no request document: its output live, then the verdict and what it changed')
  // A bad option means nothing ran: exec's own 125, so a program's 2 is never mistaken for it.
  .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : 125))
  .argument('<command...>', 'the program and its arguments (after --)')
  .passThroughOptions()
  .option('--ro <path>', 'a host path the program may read (read-only); repeat for more', collect)
  .option('--rw <dir>', 'a host folder the program may change, through a copy-on-write overlay: the real folder changes only on promote; repeat for more', collect)
  .option('--net <host[:port]>', 'a destination the program may reach (allowlist entry, within the policy\'s ceiling); repeat for more', collect)
  .option('--in <file>', 'a file copied into /in (read-only); repeat for more', collect)
  .option('--cwd <dir>', 'working directory inside the sandbox (default: the current folder when the sandbox shows it, else /tmp)')
  .option('--timeout <sec>', 'wall time limit (default: the policy\'s limits.time_sec)', positive('--timeout'))
  .option('--memory <mb>', 'memory limit (default: limits.memory_mb)', positive('--memory'))
  .option('--cpus <n>', 'CPU cores (default: limits.cpu_cores)', positive('--cpus'))
  .option('--pids <n>', 'processes and threads at once (default: limits.pids)', positive('--pids'))
  .option('--disk <mb>', 'bytes the run may write to /out and its --rw folders (default: limits.out_mb)', positive('--disk'))
  .option('--files <n>', 'files it may leave there (default: limits.files)', positive('--files'))
  .option('--promote', 'apply a PROMOTE verdict\'s changes to the --rw folders at once')
  .option('--quiet', 'do not show the program\'s output live (it is in the Sandbox Result)')
  .option('--json', 'print the Sandbox Result JSON on stdout instead (no live output)')
  .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
  .addHelpText(
    'after',
    `
Exit status: the program's own when it ran to its end and was not blocked (128+N when killed by
signal N); 124 killed at the time limit; 125 nothing ran (bad option, the policy refused it);
126 the verdict is BLOCK; 127 the command is not in the sandbox; 130 interrupted (Ctrl-C).

Examples:
  airlock exec -- ls -la /usr
  airlock exec --rw "$PWD" -- make            # then: airlock promote <sandbox id>
  airlock exec --net pypi.org:443 -- pip download requests`,
  )
  .action(async (command: string[], opts: import('./exec.js').ExecOptions) => {
    const { execCommand } = await import('./exec.js');
    process.exitCode = await execCommand(command, opts);
  });

program
  .command('show')
  .description('a past run: verdict, reasons, resources, and what it changed, with text diffs (like git show)')
  .argument('<sandbox_id>', 'the run (sbx-...; `airlock runs` lists them)')
  .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
  .option('--json', 'the run record, the Sandbox Result and the changes with their diffs, as JSON')
  .action(async (sandboxId: string, opts: { workspace?: string; json?: boolean }) => {
    const { showCommand } = await import('./show.js');
    process.exitCode = showCommand(sandboxId, opts);
  });

program
  .command('runs')
  .description('recent runs, newest first, one line each: time, sandbox id, door, verdict, command')
  .option('--limit <n>', 'how many (default 20)', positive('--limit'))
  .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
  .option('--json', 'machine-readable')
  .option('--last', 'print only the newest run\'s sandbox id (for scripts: id=$(airlock runs --last)); exit 2 when there is none')
  .action(async (opts: { workspace?: string; json?: boolean; limit?: number; last?: boolean }) => {
    const { runsCommand } = await import('./show.js');
    process.exitCode = runsCommand(opts);
  });

program
  .command('doctor')
  .description('print what this host can enforce for the sandbox, and which limits will only be reported')
  .option('--json', 'print the capabilities as JSON')
  .option('--workspace <dir>', 'workspace whose disk to check (default: $AIRLOCK_HOME or ~/.airlock)')
  .action(async (opts: { json?: boolean; workspace?: string }) => {
    const { doctorCommand } = await import('./doctor.js');
    process.exitCode = await doctorCommand(opts);
  });

program
  .command('setup')
  .description('host set-up as root: make the user sandboxes run as; delegate a cgroup subtree so that USER\'s runs have their limits enforced without root; favor cgroup moves; make idle CPUs poll; or rescan the sandbox uid range')
  .option('--sandbox-user', 'make the system user airlock-sandbox that root Airlock runs sandboxes as (its own uid and group; without it they run as the host\'s shared nobody)')
  .option('--delegate <user>', 'create the subtree for USER (cgroup v1: memory, pids, cpuacct, freezer; v2: one delegated folder)')
  .option('--undelegate <user>', 'remove USER\'s subtree (their leftover run groups are killed first)')
  .option('--favor-cgroup-moves', 'turn on the kernel\'s favordynmods until the next reboot: a sandbox\'s move into its cgroup never waits for a grace period (host-wide: forks and exits get slightly slower)')
  .option('--poll-idle-cpus', 'in a KVM guest with haltpoll: idle CPUs poll 200 µs before they halt, until the next reboot, so each syscall the tracer observes does not wake a CPU through the hypervisor (host-wide: the hypervisor spends the polling)')
  .option('--rescan-run-ids', 'look for what the sandbox uid range owns on the host (files, IPC objects, keys, processes) and hand its ids out again, skipping those: each id goes to one sandbox until this runs (airlock doctor\'s "run uids" line says how many are left)')
  .option('--json', 'machine-readable')
  .addHelpText('after', '\nExamples (as root, once):\n  airlock setup --sandbox-user       # scripts/setup.sh runs it\n  airlock setup --delegate alice     # then, as alice: airlock doctor\n  airlock setup --favor-cgroup-moves # airlock doctor\'s "cgroup moves" line says when it helps\n  airlock setup --poll-idle-cpus     # airlock doctor\'s "idle CPUs" line says when it helps\n  airlock setup --rescan-run-ids     # when doctor\'s "run uids" line says the range is used up')
  .action(async (opts: import('./setup.js').SetupOptions) => {
    const { setupCommand } = await import('./setup.js');
    process.exitCode = await setupCommand(opts);
  });

registerAuditCommands(program);
registerUtpCommands(program);
registerCommitCommands(program);

const gate = () => import('./gate.js');

program
  .command('init')
  .description('create a workspace: policy.yaml with safe defaults, the gate folders, store, audit log, artifacts')
  .argument('[dir]', 'workspace folder (default: $AIRLOCK_HOME or ~/.airlock)')
  .action(async (dir?: string) => {
    process.exitCode = (await gate()).initCommand(dir);
  });

program
  .command('keygen')
  .description('make an Ed25519 key pair for an operator: private key kept outside the workspace, public key added to the policy')
  .requiredOption('--operator <name>', 'operator name')
  .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
  .option('--key-dir <dir>', 'where the private key goes (default: $AIRLOCK_KEYS or ~/.config/airlock/keys)')
  .action(async (opts: { operator: string; workspace?: string; keyDir?: string }) => {
    process.exitCode = (await gate()).keygenCommand(opts);
  });

program
  .command('approve')
  .description('show a Tool Request, confirm, sign it as an operator, store its inputs and move it into requests_in/')
  .argument('<file>', 'the TR-*.md (its input files beside it)')
  .requiredOption('--operator <name>', 'the approving operator')
  .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
  .option('--key-dir <dir>', 'where the operator\'s private key is (default: $AIRLOCK_KEYS or ~/.config/airlock/keys)')
  .option('--yes', 'approve without asking (for scripts)')
  .action(async (file: string, opts: { operator: string; workspace?: string; keyDir?: string; yes?: boolean }) => {
    process.exitCode = await (await gate()).approveCommand(file, opts);
  });

program
  .command('serve')
  .description('the gate service: run approved requests from requests_in/ once each (results to inbound/ or quarantine/); with --nats, the UTP tool service')
  .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
  .option('--once', 'process what is waiting, then exit (folder gate)')
  .addOption(new Option('--log-format <format>', 'text for people, or json: one object per line, the same shape as the UTP service\'s log').choices(['text', 'json']).default('text'))
  .option('--nats <url>', 'serve registered UTP tools over NATS JetStream (e.g. nats://127.0.0.1:4222)')
  .option('--db <db>', 'UTP store: postgres://user@host/db[?schema=name], or a SQLite file (default <workspace>/airlock.db)')
  .option('--stream <name>', 'JetStream stream (UTP)', 'AIRLOCK_UTP')
  .option('--durable <name>', 'durable pull consumer shared by every worker (UTP)', 'airlock-utp')
  .option('--concurrency <n>', 'calls run at once by this worker (UTP)', (v) => Number(v), 32)
  .option('--lease-ms <ms>', 'claim lease; a dead worker\'s calls are answered executor_lost after it (UTP)', (v) => Number(v), 30000)
  .action(async (opts: { workspace?: string; once?: boolean; logFormat?: string; nats?: string; db?: string; stream?: string; durable?: string; concurrency?: number; leaseMs?: number }) => {
    if (opts.nats) {
      const { serveNats } = await import('./commands/utp.js');
      process.exitCode = await serveNats({ nats: opts.nats, db: opts.db, workspace: opts.workspace, stream: opts.stream, durable: opts.durable, concurrency: opts.concurrency, leaseMs: opts.leaseMs });
      return;
    }
    process.exitCode = await (await gate()).serveCommand(opts);
  });

program
  .command('status')
  .description('list what is waiting, running, accepted and quarantined')
  .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
  .option('--json', 'machine-readable')
  .action(async (opts: { workspace?: string; json?: boolean }) => {
    process.exitCode = (await gate()).statusCommand(opts);
  });

program
  .command('policy')
  .description('host policy tools')
  .command('check')
  .description('validate policy.yaml (same coded problems as `airlock check`)')
  .argument('[file]', 'a policy file (default: the workspace\'s policy.yaml)')
  .option('--workspace <dir>', 'workspace (default: $AIRLOCK_HOME or ~/.airlock)')
  .option('--json', 'machine-readable')
  .action(async (file: string | undefined, opts: { workspace?: string; json?: boolean }) => {
    process.exitCode = (await gate()).policyCheckCommand({ ...opts, file });
  });

program
  .command('demo')
  .description('set up a demo workspace, approve the bundled example requests, serve them once, show where each result went')
  .option('--workspace <dir>', 'demo workspace (default: a new folder under the temp dir)')
  .action(async (opts: { workspace?: string }) => {
    process.exitCode = await (await gate()).demoCommand(opts);
  });

let command = '';
program.hook('preAction', (_, cmd) => void (command = cmd.name()));
program.parseAsync(process.argv).catch((e: unknown) => {
  // A WorkspaceError (workspace.ts, not imported here: it would slow every command's start):
  // nothing was read or made. Bad input; in exec's terms (EXEC_EXIT.refused) "nothing ran".
  if (e instanceof Error && (e as { code?: unknown }).code === 'WS_NOT_PRIVATE') {
    process.stderr.write(`airlock: WS_NOT_PRIVATE: ${e.message}\n`);
    process.exitCode = command === 'exec' ? 125 : EXIT.rejected;
    return;
  }
  process.stderr.write(`airlock: internal error: ${(e as Error).stack ?? e}\n`);
  process.exitCode = EXIT.internal;
});
