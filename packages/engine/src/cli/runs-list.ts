import { Command, Option } from 'commander';
import { RUN_STATUSES } from '../turn/state-machine.js';
import type { RunDescription, RunStatus } from '../index.js';
import { globalOptions, type Output } from './output.js';
import { wholeNumber } from './parse-arguments.js';
import {
  formatDuration,
  formatTimestamp,
  msBetween,
  paint,
  statusStyle,
  table,
  type Terminal,
} from './format.js';

/**
 * The runs table: id (full, to paste into `runs show`), status, name (full: names are at most 128 characters, and
 * a cut one could name another workflow), idempotency key (`—` for none), creation time, duration. Beside a full
 * run id and creation time a 100-column line has room for little else, so a key that does not fit its column is
 * cut in the middle there and printed whole on the line under its run (`key <key>`), to read and to copy. A line
 * that cannot fit the width even so stays long rather than cut a name.
 */
export function formatRunsTable(term: Terminal, runs: readonly RunDescription[], nowIso: string): string[] {
  return table(
    term,
    [
      { header: 'RUN ID' },
      { header: 'STATUS' },
      { header: 'KIND' },
      { header: 'NAME' },
      { header: 'KEY', shrink: 'middle', minWidth: 6, wholeBelow: 'key' },
      { header: 'CREATED (UTC)' },
      { header: 'DURATION', align: 'right' },
    ],
    runs.map((r) => [
      r.id,
      { text: r.status, style: statusStyle(r.status) },
      { text: r.kind === 'workflow' ? 'wf' : 'act', style: 'dim' },
      r.name,
      r.idempotencyKey ?? { text: '—', style: 'dim' },
      formatTimestamp(r.createdAt),
      r.status === 'pending'
        ? '—'
        : formatDuration(msBetween(r.startedAt ?? r.createdAt, r.finishedAt ?? nowIso)),
    ]),
  );
}

/** `palisade runs list`: newest runs first, optionally filtered. */
export function runsListCommand(output: Output): Command {
  return new Command('list')
    .description('list runs, newest first')
    .addOption(new Option('--status <status>', 'only runs with this status').choices(RUN_STATUSES))
    .option('--name <name>', 'only runs of this workflow or activity')
    .option('--limit <n>', 'at most this many runs (1–1000)', wholeNumber(1, 1000), 50)
    .action(async (options: { status?: RunStatus; name?: string; limit: number }, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      const target = resolveTarget(g);
      const runs = await withEngine(target, 'runs', (engine) =>
        engine.client.list({ status: options.status, name: options.name, limit: options.limit }),
      );
      if (g.json) {
        output.printJson(runs);
        return;
      }
      const t = output.terminal;
      if (runs.length === 0) {
        output.line(
          paint(
            t,
            'dim',
            `no runs${options.status || options.name ? ' match' : ''} in schema ${target.schema}`,
          ),
        );
        return;
      }
      for (const line of formatRunsTable(t, runs, new Date().toISOString())) output.line(line);
      if (runs.length === options.limit) {
        output.line(paint(t, 'dim', `(the newest ${runs.length}; --limit shows more)`));
      }
    });
}
