import { Command } from 'commander';
import { paint, truncate } from './format.js';
import { globalOptions, type Output } from './output.js';

/**
 * `palisade migrate`: bring the schema up to date with the migrations this version ships (forward-only, under
 * an advisory lock, so it is safe while workers start). Creates the embedded database when it does not exist.
 */
export function migrateCommand(output: Output): Command {
  return new Command('migrate')
    .description('create or upgrade the Palisade schema (safe to run while workers start)')
    .action(async (_options: unknown, command: Command) => {
      const g = globalOptions(command);
      const { describeDatabase, loadMigrations, resolveTarget, withEngine } =
        await import('./open-engine.js');
      const target = resolveTarget(g);
      const result = await withEngine(target, 'migrate', (engine) => engine.migrate());
      const known = (await loadMigrations()).length;
      if (g.json) {
        output.printJson({ schema: target.schema, applied: result.applied, version: result.version, known });
        return;
      }
      const t = output.terminal;
      output.line(
        result.applied.length === 0
          ? `schema ${target.schema} is ${paint(t, 'green', 'up to date')} (migration ${result.version})`
          : `schema ${target.schema} migrated to migration ${result.version}`,
      );
      output.line(
        `  ${paint(t, 'dim', 'database')}  ${truncate(describeDatabase(target), t.width - 12, 'middle')}`,
      );
      for (const name of result.applied) output.line(`  ${paint(t, 'green', 'applied')}   ${name}`);
    });
}
