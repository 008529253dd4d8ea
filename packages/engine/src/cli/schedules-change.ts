import { Command } from 'commander';
import { globalOptions, type Output } from './output.js';
import { formatTimestamp } from './format.js';

/** `palisade schedules pause <id>`: no tick fires until resume. */
export function schedulesPauseCommand(output: Output): Command {
  return new Command('pause')
    .description('pause a schedule: no tick fires until it is resumed')
    .argument('<id>', 'schedule id')
    .action(async (id: string, _options: unknown, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      const s = await withEngine(resolveTarget(g), 'runs', (engine) => engine.schedules.pause(id));
      if (g.json) output.printJson(s);
      else output.line(`schedule ${id} paused`);
    });
}

/** `palisade schedules resume <id>`: the next tick is the first after now; no backlog fires. */
export function schedulesResumeCommand(output: Output): Command {
  return new Command('resume')
    .description('resume a paused schedule at its next tick from now (ticks missed while paused never fire)')
    .argument('<id>', 'schedule id')
    .action(async (id: string, _options: unknown, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      const s = await withEngine(resolveTarget(g), 'runs', (engine) => engine.schedules.resume(id));
      if (g.json) output.printJson(s);
      else {
        output.line(
          `schedule ${id} active; next tick ${formatTimestamp(s.nextTickAt.toISOString(), true)} UTC`,
        );
      }
    });
}

/** `palisade schedules trigger <id>`: start a run now, whatever the overlap policy. */
export function schedulesTriggerCommand(output: Output): Command {
  return new Command('trigger')
    .description('start a run of a schedule now (its regular ticks go on as before)')
    .argument('<id>', 'schedule id')
    .action(async (id: string, _options: unknown, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      const runId = await withEngine(resolveTarget(g), 'runs', (engine) => engine.schedules.trigger(id));
      if (g.json) output.printJson({ scheduleId: id, runId });
      else output.line(`schedule ${id} started run ${runId}`);
    });
}

/** `palisade schedules delete <id>`: no tick fires any more; its runs are kept. */
export function schedulesDeleteCommand(output: Output): Command {
  return new Command('delete')
    .description('delete a schedule (its runs are kept)')
    .argument('<id>', 'schedule id')
    .action(async (id: string, _options: unknown, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      await withEngine(resolveTarget(g), 'runs', (engine) => engine.schedules.delete(id));
      if (g.json) output.printJson({ scheduleId: id, deleted: true });
      else output.line(`schedule ${id} deleted`);
    });
}
