// Initialise an in-memory PGlite and write its data directory as a tarball at process.argv[2] (see ./pglite.ts).
// A process of its own: PGlite's runtime may end the process that hosts it when it closes, and the global setup
// runs in vitest's own.
import { writeFile } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';

const path = process.argv[2];
if (!path) throw new Error('usage: pglite-template.ts <tarball path>');
const pglite = new PGlite();
await pglite.waitReady;
const blob = await pglite.dumpDataDir('none');
await writeFile(path, Buffer.from(await blob.arrayBuffer()));
await pglite.close();
