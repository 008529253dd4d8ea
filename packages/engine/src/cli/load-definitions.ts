import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { PalisadeError, type ActivityDefinition, type WorkflowDefinition } from '@palisade/sdk';

/** The workflows and activities a module exports. */
export interface Definitions {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly workflows: readonly WorkflowDefinition<any, any>[];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly activities: readonly ActivityDefinition<any, any>[];
}

function kindOf(value: unknown): 'workflow' | 'activity' | undefined {
  if (value === null || typeof value !== 'object') return undefined;
  const kind = (value as { kind?: unknown }).kind;
  return kind === 'workflow' || kind === 'activity' ? kind : undefined;
}

/**
 * Import `modulePath` (resolved from `cwd`) and collect every exported value made by `defineWorkflow` or
 * `defineActivity`, recognised by its `kind` (not `instanceof`, so a module bundling its own copy of the SDK
 * works too). A default export that is a plain object of definitions (`export default { a, b }`) counts as well.
 * @throws PalisadeError `INVALID_OPTIONS` when the file is missing, fails to load, or exports no definition.
 */
export async function loadDefinitions(modulePath: string, cwd: string): Promise<Definitions> {
  const file = resolve(cwd, modulePath);
  if (!existsSync(file)) {
    throw new PalisadeError('INVALID_OPTIONS', `worker module ${modulePath} not found (looked at ${file})`);
  }
  let exported: Record<string, unknown>;
  try {
    exported = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    const reason = error instanceof Error ? error.message.split('\n')[0] : String(error);
    throw new PalisadeError('INVALID_OPTIONS', `worker module ${modulePath} failed to load: ${reason}`, {
      cause: error,
    });
  }
  const values = new Set<unknown>();
  for (const [name, value] of Object.entries(exported)) {
    if (kindOf(value)) values.add(value);
    else if (name === 'default' && value !== null && typeof value === 'object') {
      for (const inner of Object.values(value)) if (kindOf(inner)) values.add(inner);
    }
  }
  const all = [...values];
  const definitions: Definitions = {
    workflows: all.filter((v) => kindOf(v) === 'workflow') as Definitions['workflows'],
    activities: all.filter((v) => kindOf(v) === 'activity') as Definitions['activities'],
  };
  if (all.length === 0) {
    throw new PalisadeError(
      'INVALID_OPTIONS',
      `worker module ${modulePath} exports no workflow or activity (export the values defineWorkflow() and ` +
        'defineActivity() return)',
    );
  }
  return definitions;
}
