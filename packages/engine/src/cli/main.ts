#!/usr/bin/env node
/**
 * The `palisade` command line: migrate a schema, run a worker for a module, list, show, cancel, retry and prune
 * runs, list, show, pause, resume, trigger and delete schedules, and `dev`, a local PostgreSQL for development.
 *
 * Exit codes: 0 success; 1 the operation failed (a Palisade error prints its message, which starts with
 * `[CODE]`, e.g. `[RUN_NOT_FOUND]`); 2 bad arguments (commander's message and the command's usage).
 * From this repository without a build: `pnpm palisade <command>`.
 * @module
 */
import { Command, CommanderError, Option } from 'commander';
import { devCommand } from './dev.js';
import { migrateCommand } from './migrate.js';
import { createOutput, type Output } from './output.js';
import { runsCancelCommand } from './runs-cancel.js';
import { runsSignalCommand } from './runs-signal.js';
import { runsListCommand } from './runs-list.js';
import { runsPruneCommand } from './runs-prune.js';
import { runsRetryCommand } from './runs-retry.js';
import { runsShowCommand } from './runs-show.js';
import { runsWatchCommand } from './runs-watch.js';
import {
  schedulesDeleteCommand,
  schedulesPauseCommand,
  schedulesResumeCommand,
  schedulesTriggerCommand,
} from './schedules-change.js';
import { schedulesListCommand } from './schedules-list.js';
import { schedulesShowCommand } from './schedules-show.js';
import { workerCommand } from './worker.js';

/** Exit code of a run that failed, and of a command line that could not be understood. */
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/**
 * The `palisade` program; `output` is where commands print. Commands load the engine only inside their action,
 * so `--help` and usage errors answer without loading the database drivers.
 */
export function buildProgram(output: Output): Command {
  const program = new Command('palisade')
    .description(
      'Palisade: durable workflows on PostgreSQL, fenced so a zombie worker never clobbers newer work',
    )
    .addOption(
      new Option('--database-url <url>', 'PostgreSQL connection string (default: the embedded database)').env(
        'DATABASE_URL',
      ),
    )
    // No default values here: the engine's own defaults apply (and reading them would load the engine).
    .option(
      '--data-dir <dir>',
      'embedded database directory, used when no URL is given (default: .palisade/db)',
    )
    .addOption(
      new Option('--schema <name>', 'PostgreSQL schema of the engine tables (default: palisade)').env(
        'PALISADE_SCHEMA',
      ),
    )
    .option('--json', 'print JSON on stdout (for scripts) instead of text')
    .showHelpAfterError()
    .exitOverride();

  const configure = (command: Command): Command => command.showHelpAfterError().exitOverride();
  program.addCommand(configure(migrateCommand(output)));
  program.addCommand(configure(devCommand(output)));
  program.addCommand(configure(workerCommand(output)));
  const runs = configure(
    new Command('runs').description('list, show, watch, signal, cancel, retry and prune runs'),
  );
  for (const command of [
    runsListCommand(output),
    runsShowCommand(output),
    runsWatchCommand(output),
    runsCancelCommand(output),
    runsSignalCommand(output),
    runsRetryCommand(output),
    runsPruneCommand(output),
  ]) {
    runs.addCommand(configure(command));
  }
  program.addCommand(runs);
  const schedules = configure(
    new Command('schedules').description('list, show, pause, resume, trigger and delete schedules'),
  );
  for (const command of [
    schedulesListCommand(output),
    schedulesShowCommand(output),
    schedulesPauseCommand(output),
    schedulesResumeCommand(output),
    schedulesTriggerCommand(output),
    schedulesDeleteCommand(output),
  ]) {
    schedules.addCommand(configure(command));
  }
  program.addCommand(schedules);
  return program;
}

/** A Palisade error, recognised by its code (not `instanceof`: a served module may bundle its own SDK copy). */
function isPalisadeError(error: unknown): error is Error & { code: string } {
  const code = (error as { code?: unknown } | null)?.code;
  return error instanceof Error && typeof code === 'string' && error.message.startsWith(`[${code}]`);
}

/** What to print for an error that ends the command, and the exit code. */
export function describeFailure(error: unknown, debug: boolean): { message: string; exitCode: number } {
  if (error instanceof CommanderError) {
    // commander already printed its message (and the usage); help and version are not failures.
    const ok = ['commander.helpDisplayed', 'commander.version'];
    return { message: '', exitCode: ok.includes(error.code) ? 0 : EXIT_USAGE };
  }
  const stack = debug && error instanceof Error && error.stack ? `\n${error.stack}` : '';
  if (isPalisadeError(error)) return { message: error.message + stack, exitCode: EXIT_FAILURE };
  // drizzle wraps driver errors as "Failed query: <sql>"; the driver's own error says what went wrong.
  let cause = error;
  while (cause instanceof Error && cause.message.startsWith('Failed query') && cause.cause !== undefined) {
    cause = cause.cause;
  }
  const message = cause instanceof Error ? cause.message : String(cause);
  const code = (cause as { code?: unknown } | null)?.code;
  const unreachable = ['ECONNREFUSED', 'ENOTFOUND', 'ETIMEDOUT', 'EHOSTUNREACH', 'CONNECT_TIMEOUT'];
  const prefix = typeof code === 'string' && unreachable.includes(code) ? 'cannot reach the database: ' : '';
  return { message: `error: ${prefix}${message}${stack}`, exitCode: EXIT_FAILURE };
}

/** Run the CLI on `argv` (as `process.argv`); resolves to the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const output = createOutput();
  try {
    await buildProgram(output).parseAsync([...argv]);
    return 0;
  } catch (error) {
    const { message, exitCode } = describeFailure(error, process.env.PALISADE_DEBUG !== undefined);
    if (message) output.error(message);
    return exitCode;
  }
}

// A reader that stops early (`palisade runs show <id> | head`) closes the pipe: the rest of the output has nowhere
// to go, which is not a failure of the command. Without a listener the write's EPIPE is an unhandled 'error' event.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(process.exitCode ?? 0);
  throw error;
});

process.exitCode = await main(process.argv);
