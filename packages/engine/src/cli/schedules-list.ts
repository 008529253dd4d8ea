import { Command } from 'commander';
import type { Schedule } from '../index.js';
import { globalOptions, type Output } from './output.js';
import { wholeNumber } from './parse-arguments.js';
import { formatTimestamp, paint, table, type Terminal } from './format.js';

/** A schedule's spec as people write it: the cron expression and its zone, or the interval. */
export function formatSpec(s: Schedule): string {
  if ('cron' in s.spec)
    return s.spec.timezone === 'UTC' ? s.spec.cron : `${s.spec.cron} (${s.spec.timezone})`;
  const ms = s.spec.everyMs;
  const units: [number, string][] = [
    [86_400_000, 'd'],
    [3_600_000, 'h'],
    [60_000, 'm'],
    [1_000, 's'],
  ];
  const unit = units.find(([size]) => ms % size === 0);
  return unit ? `every ${ms / unit[0]}${unit[1]}` : `every ${ms}ms`;
}

/** The schedules table: id, spec, target, state, next tick, last run. */
export function formatSchedulesTable(term: Terminal, schedules: readonly Schedule[]): string[] {
  return table(
    term,
    [
      { header: 'SCHEDULE', shrink: 'end', minWidth: 8 },
      { header: 'SPEC', shrink: 'end', minWidth: 9 },
      { header: 'TARGET', shrink: 'end', minWidth: 8 },
      { header: 'STATE' },
      { header: 'NEXT TICK (UTC)' },
      { header: 'LAST TICK (UTC)' },
    ],
    schedules.map((s) => [
      s.id,
      formatSpec(s),
      `${s.target.kind === 'workflow' ? 'wf' : 'act'} ${s.target.name}`,
      s.paused ? { text: 'paused', style: 'yellow' } : { text: 'active', style: 'green' },
      s.paused ? { text: '—', style: 'dim' } : formatTimestamp(s.nextTickAt.toISOString()),
      s.lastTickAt ? formatTimestamp(s.lastTickAt.toISOString()) : { text: '—', style: 'dim' },
    ]),
  );
}

/** `palisade schedules list`: every schedule of the schema, by id. */
export function schedulesListCommand(output: Output): Command {
  return new Command('list')
    .description('list schedules, by id')
    .option('--limit <n>', 'at most this many schedules (1–10000)', wholeNumber(1, 10_000), 1_000)
    .action(async (options: { limit: number }, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      const target = resolveTarget(g);
      const schedules = await withEngine(target, 'runs', (engine) =>
        engine.schedules.list({ limit: options.limit }),
      );
      if (g.json) {
        output.printJson(schedules);
        return;
      }
      const t = output.terminal;
      if (schedules.length === 0) {
        output.line(paint(t, 'dim', `no schedules in schema ${target.schema}`));
        return;
      }
      for (const line of formatSchedulesTable(t, schedules)) output.line(line);
    });
}
