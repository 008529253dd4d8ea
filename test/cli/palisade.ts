/**
 * The `palisade` command, reached through the engine package as any user of it would (`@palisade/engine/cli`,
 * the module the `palisade` bin runs): importing it runs the CLI on `process.argv`. Started by `cli-process.ts`
 * with `--conditions=@palisade/source`, so it runs the engine's TypeScript source without a build.
 */
import '@palisade/engine/cli';
