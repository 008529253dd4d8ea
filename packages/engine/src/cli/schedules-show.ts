import { Command } from 'commander';
import type { ScheduleDescription } from '../index.js';
import { globalOptions, type Output } from './output.js';
import { compactJson, formatTimestamp, paint, truncate, type Style, type Terminal } from './format.js';
import { formatRunsTable } from './runs-list.js';
import { formatSpec } from './schedules-list.js';

/** The text of `palisade schedules show`: the schedule's fields, then the runs of its newest ticks. */
export function formatScheduleDescription(term: Terminal, d: ScheduleDescription, nowIso: string): string[] {
  const s = d.schedule;
  const width = term.width;
  const field = (key: string, value: string, style?: Style) =>
    `${paint(term, 'dim', key.padEnd(9))} ${paint(term, style, truncate(value, width - 10))}`;
  const when = (date: Date | null) => (date ? `${formatTimestamp(date.toISOString(), true)} UTC` : '—');
  const catchup = typeof s.catchup === 'string' ? s.catchup : `all within ${s.catchup.all.windowMs} ms`;
  const lines = [
    field('schedule', s.id, 'bold'),
    field('spec', formatSpec(s)),
    field('starts', `${s.target.kind} ${s.target.name} · queue ${s.queue} · priority ${s.priority}`),
    field('input', compactJson(s.input, width - 10)),
    field('state', s.paused ? 'paused' : 'active', s.paused ? 'yellow' : 'green'),
    field('next', s.paused ? '— (resume sets it from now)' : when(s.nextTickAt)),
    field('last', s.lastTickAt ? `${when(s.lastTickAt)} · run ${s.lastRunId ?? '—'}` : '—'),
    field('policy', `overlap ${s.overlap} · catch-up ${catchup} · ${s.skippedTicks} ticks skipped`),
  ];
  if (s.bufferedTickAt) lines.push(field('buffered', `${when(s.bufferedTickAt)} (waits for the last run)`));
  lines.push('');
  if (d.recentRuns.length === 0) lines.push(paint(term, 'dim', 'no runs yet'));
  else lines.push(...formatRunsTable(term, d.recentRuns, nowIso));
  return lines;
}

/** `palisade schedules show <id>`: one schedule and the runs of its newest ticks. */
export function schedulesShowCommand(output: Output): Command {
  return new Command('show')
    .description('show one schedule and the runs of its newest ticks')
    .argument('<id>', 'schedule id (as `schedules list` prints it)')
    .action(async (id: string, _options: unknown, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      const described = await withEngine(resolveTarget(g), 'runs', (engine) => engine.schedules.describe(id));
      if (g.json) {
        output.printJson(described);
        return;
      }
      for (const line of formatScheduleDescription(output.terminal, described, new Date().toISOString())) {
        output.line(line);
      }
    });
}
