import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Engine } from '@palisade/engine';
import { refundApprovalSignal, type RefundApproval } from './workflow.js';

/** Where a decision went, and the `palisade` command that sends it. */
export interface SentDecision {
  /** `palisade CLI`: the command ran as a child process; `client.signal`: sent in process (the same signal). */
  readonly via: 'palisade CLI' | 'client.signal';
  /** The command line, as a person would type it from the repository root. */
  readonly command: string;
  /** What the CLI printed (empty when sent in process). */
  readonly output: string;
}

/** Options of {@link sendDecision}. */
export interface SendDecisionOptions {
  readonly engine: Engine;
  readonly runId: string;
  readonly decision: RefundApproval;
  /**
   * Run `palisade runs signal` as a child process against this database (PostgreSQL: the embedded database serves
   * one process, the demo's). Without it the signal is sent in process, with `client.signal`.
   */
  readonly cli?: { readonly databaseUrl: string; readonly schema: string };
}

/** `'…'` for a POSIX shell. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

/**
 * The `palisade` CLI's entry point beside the engine this module resolves (`src/cli/main.ts` when run from source,
 * `dist/cli/main.js` when built), and whether it needs tsx to load.
 */
function cliEntry(): { path: string; fromSource: boolean } {
  const engineUrl = import.meta.resolve('@palisade/engine');
  const fromSource = engineUrl.endsWith('.ts');
  return {
    path: fileURLToPath(new URL(fromSource ? './cli/main.ts' : './cli/main.js', engineUrl)),
    fromSource,
  };
}

/**
 * Send a person's decision on a refund to the email's run: with `palisade runs signal <run>
 * support-agent.refund-approval '<json>'` run as a child process when `cli` is given, otherwise in process.
 * @throws Error naming the command and its output when the CLI exits with a failure.
 */
export async function sendDecision(options: SendDecisionOptions): Promise<SentDecision> {
  const json = JSON.stringify(options.decision);
  const schemaFlag =
    options.cli && options.cli.schema !== 'palisade' ? ` --schema ${options.cli.schema}` : '';
  const command = `npx -y pnpm@12.4.2 palisade${schemaFlag} runs signal ${options.runId} ${refundApprovalSignal.name} ${shellQuote(json)}`;
  if (!options.cli) {
    await options.engine.client.signal(options.runId, refundApprovalSignal, options.decision);
    return { via: 'client.signal', command, output: '' };
  }
  const entry = cliEntry();
  const args = [
    ...(entry.fromSource ? ['--conditions=@palisade/source', '--import', import.meta.resolve('tsx')] : []),
    entry.path,
    '--database-url',
    options.cli.databaseUrl,
    '--schema',
    options.cli.schema,
    'runs',
    'signal',
    options.runId,
    refundApprovalSignal.name,
    json,
  ];
  const env = { ...process.env };
  delete env.NODE_OPTIONS; // a test runner's loader options must not leak into the CLI
  const output = await new Promise<string>((resolve, reject) => {
    execFile(process.execPath, args, { env, timeout: 60_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${command} failed: ${error.message}\n${stdout}${stderr}`));
      else resolve(stdout.trim());
    });
  });
  return { via: 'palisade CLI', command, output };
}
