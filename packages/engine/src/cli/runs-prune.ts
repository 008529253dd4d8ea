import { Command } from 'commander';
import { globalOptions, type Output } from './output.js';
import { duration } from './parse-arguments.js';

/**
 * `palisade runs prune --older-than <duration> [--dry-run]`: delete the runs that ended (completed, failed or
 * cancelled) longer ago than the duration, by the database clock, with their steps, attempts and events
 * (`engine.pruneRuns`); their idempotency keys are free again. Runs that have not ended are never deleted.
 * Prints how many rows of each kind went (or, with `--dry-run`, would go).
 */
export function runsPruneCommand(output: Output): Command {
  return new Command('prune')
    .description('delete runs that ended longer ago than a duration, with their steps, attempts and events')
    .requiredOption('--older-than <duration>', 'age of the runs to delete, e.g. 30d, 12h, 90m', duration)
    .option('--dry-run', 'count what would be deleted; delete nothing')
    .action(async (options: { olderThan: number; dryRun?: boolean }, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      const result = await withEngine(resolveTarget(g), 'runs', (engine) =>
        engine.pruneRuns({ olderThanMs: options.olderThan, dryRun: options.dryRun === true }),
      );
      if (g.json) {
        output.printJson(result);
        return;
      }
      const verb = result.dryRun ? 'would delete' : 'deleted';
      output.line(
        `${verb} ${plural(result.runs, 'run')} (${plural(result.steps, 'step')}, ` +
          `${plural(result.attempts, 'attempt')}, ${plural(result.events, 'event')}) ` +
          `that ended more than ${describeMs(result.olderThanMs)} ago`,
      );
    });
}

function plural(count: number, noun: string): string {
  return `${count.toLocaleString('en-US')} ${noun}${count === 1 ? '' : 's'}`;
}

/** `ms` in the largest unit that divides it: 30d, 12h, 90m, 45s, 250ms. */
function describeMs(ms: number): string {
  const units: [string, number][] = [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
  ];
  for (const [unit, size] of units) if (ms > 0 && ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}
