import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  PalisadeError,
  type ActivityDefinition,
  type SignalDefinition,
  type WorkflowDefinition,
} from '@palisade/sdk';

/** The workflows, activities and signals a module exports. */
export interface Definitions {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly workflows: readonly WorkflowDefinition<any, any>[];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly activities: readonly ActivityDefinition<any, any>[];
  /** The signals it exports (`defineSignal`): what `palisade runs signal --module` checks a signal against. */
  readonly signals: readonly SignalDefinition[];
}

function kindOf(value: unknown): 'workflow' | 'activity' | 'signal' | undefined {
  if (value === null || typeof value !== 'object') return undefined;
  const kind = (value as { kind?: unknown }).kind;
  return kind === 'workflow' || kind === 'activity' || kind === 'signal' ? kind : undefined;
}

const TYPESCRIPT = /\.[cm]?tsx?$/;

/**
 * The file of tsx's ESM loader API (`tsx/esm/api`, its `import` entry), resolved the way the user's own code
 * would resolve it: from the module's directory, then from the working directory. Undefined when the project
 * has no tsx.
 */
function findTsx(file: string, cwd: string): string | undefined {
  for (const from of [file, join(cwd, 'package.json')]) {
    let manifest: string;
    try {
      manifest = createRequire(from).resolve('tsx/package.json');
    } catch {
      continue; // not installed where `from` can see it
    }
    const pkg = JSON.parse(readFileSync(manifest, 'utf8')) as {
      exports?: Record<string, { import?: string | { default?: string } } | undefined>;
    };
    const entry = pkg.exports?.['./esm/api']?.import;
    const target = typeof entry === 'string' ? entry : entry?.default;
    if (target !== undefined) return join(dirname(manifest), target);
  }
  return undefined;
}

/**
 * Import `file`. A TypeScript module that Node cannot load by itself (`ERR_UNKNOWN_FILE_EXTENSION`) is loaded
 * through the project's `tsx` (registered once, in this process), or refused with how to fix it.
 */
async function importModule(file: string, modulePath: string, cwd: string): Promise<Record<string, unknown>> {
  const url = pathToFileURL(file).href;
  try {
    return (await import(url)) as Record<string, unknown>;
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (!TYPESCRIPT.test(file) || code !== 'ERR_UNKNOWN_FILE_EXTENSION') throw error;
  }
  const tsx = findTsx(file, cwd);
  if (tsx === undefined) {
    throw new PalisadeError(
      'INVALID_OPTIONS',
      `worker module ${modulePath} is TypeScript, and Node.js cannot load it without a loader: install tsx in ` +
        'your project (`npm install --save-dev tsx`; palisade then loads .ts modules with it), or compile the ' +
        'module to JavaScript and pass the .js file.',
    );
  }
  const api = (await import(pathToFileURL(tsx).href)) as { register: () => unknown };
  api.register();
  // Node caches the failed load of `url`: import it again under another URL (tsx ignores the query).
  return (await import(`${url}?palisade-tsx`)) as Record<string, unknown>;
}

/**
 * Import `modulePath` (resolved from `cwd`) and collect every exported value made by `defineWorkflow`,
 * `defineActivity` or `defineSignal`, recognised by its `kind` (not `instanceof`, so a module bundling its own
 * copy of the SDK works too). A default export that is a plain object of definitions (`export default { a, b }`) counts as well.
 * A TypeScript module is loaded with the project's `tsx` when Node.js cannot load it by itself.
 * @throws PalisadeError `INVALID_OPTIONS` when the file is missing, fails to load (a TypeScript module without
 * tsx installed: the message says how to fix it), or exports no definition.
 */
export async function loadDefinitions(modulePath: string, cwd: string): Promise<Definitions> {
  const file = resolve(cwd, modulePath);
  if (!existsSync(file)) {
    throw new PalisadeError('INVALID_OPTIONS', `worker module ${modulePath} not found (looked at ${file})`);
  }
  let exported: Record<string, unknown>;
  try {
    exported = await importModule(file, modulePath, cwd);
  } catch (error) {
    if (error instanceof PalisadeError) throw error;
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
    signals: all.filter((v) => kindOf(v) === 'signal') as Definitions['signals'],
  };
  if (definitions.workflows.length + definitions.activities.length === 0) {
    throw new PalisadeError(
      'INVALID_OPTIONS',
      `worker module ${modulePath} exports no workflow or activity (export the values defineWorkflow() and ` +
        'defineActivity() return)',
    );
  }
  return definitions;
}
