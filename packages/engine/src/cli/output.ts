/**
 * What every command shares and can have without loading the engine: its output and the global options.
 * Kept free of engine imports so that `--help` and usage errors answer without loading the database drivers.
 * @module
 */
import type { Command } from 'commander';
import { detectTerminal, jsonReplacer, type Terminal } from './format.js';

/**
 * The options every command accepts (declared on the program, see ./main.ts). `dataDir` and `schema` are
 * undefined when not given: the engine's defaults (`ENGINE_DEFAULTS`) apply.
 */
export interface GlobalOptions {
  readonly databaseUrl?: string | undefined;
  /** Where `databaseUrl` came from, for messages: the flag or the environment variable. */
  readonly databaseUrlFrom?: '--database-url' | 'DATABASE_URL' | undefined;
  readonly dataDir?: string | undefined;
  readonly schema?: string | undefined;
  /** Where `schema` came from, for messages. */
  readonly schemaFrom?: '--schema' | 'PALISADE_SCHEMA' | undefined;
  /** `--json`: JSON on stdout instead of text. */
  readonly json: boolean;
}

/** Where a command's output goes and how it may look. */
export interface Output {
  readonly terminal: Terminal;
  /** A line on stdout. */
  line(text?: string): void;
  /** A line on stderr (diagnostics; never part of the JSON on stdout). */
  error(text: string): void;
  /** `value` as JSON on stdout: indented for a document, on one line when `ndjson` (a stream of events). */
  printJson(value: unknown, ndjson?: boolean): void;
}

/** Output to this process's stdout and stderr. */
export function createOutput(): Output {
  return {
    terminal: detectTerminal(process.stdout, process.env),
    line: (text = '') => void process.stdout.write(text + '\n'),
    error: (text) => void process.stderr.write(text + '\n'),
    printJson: (value, ndjson = false) =>
      void process.stdout.write(JSON.stringify(value, jsonReplacer, ndjson ? undefined : 2) + '\n'),
  };
}

/**
 * The global options as `command` sees them. A flag on the command line beats an environment variable:
 * `--data-dir x` wins over a DATABASE_URL in the environment; both flags at once are a usage error (exit 2).
 */
export function globalOptions(command: Command): GlobalOptions {
  const o = command.optsWithGlobals<{
    databaseUrl?: string;
    dataDir?: string;
    schema?: string;
    json?: boolean;
  }>();
  const urlSource = command.getOptionValueSourceWithGlobals('databaseUrl');
  const dirGiven = o.dataDir !== undefined;
  if (urlSource === 'cli' && dirGiven) {
    command.error('error: give either --database-url or --data-dir, not both', {
      exitCode: 2,
      code: 'palisade.conflictingOptions',
    });
  }
  const schemaSource = command.getOptionValueSourceWithGlobals('schema');
  return {
    databaseUrl: dirGiven ? undefined : o.databaseUrl,
    databaseUrlFrom:
      dirGiven || o.databaseUrl === undefined
        ? undefined
        : urlSource === 'env'
          ? 'DATABASE_URL'
          : '--database-url',
    dataDir: o.dataDir,
    schema: o.schema,
    schemaFrom: o.schema === undefined ? undefined : schemaSource === 'env' ? 'PALISADE_SCHEMA' : '--schema',
    json: o.json === true,
  };
}
