import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AttemptAbortedError } from '@palisade/sdk';
import {
  TRANSCODING_DEMO,
  runFfmpeg,
  runTranscodingDemo,
  type TranscodingDemoOptions,
} from '@palisade/examples';
import { useTestDatabase } from '../support/postgres.js';

const CHECKS = [
  'the run completed',
  'the stalled transcode lost its lease',
  'a reclaimed attempt on another worker won with a higher token',
  "the zombie's late upload was refused by the store",
  'every segment in the store is from its winning token',
  'the manifest lists every segment of every rendition from the winning token',
  "each output's duration matches the input",
  'each output has one video and one audio stream at its rendition size',
  'each output plays from start to end without decoder errors',
];

let workDir: string;
beforeAll(async () => {
  workDir = await mkdtemp(join(tmpdir(), 'palisade-transcoding-'));
});
afterAll(async () => {
  await rm(workDir, { recursive: true, force: true });
});

/** Run the demo as `pnpm demo` does and assert every one of its checks, with its timeline as the failure message. */
async function expectEveryCheckToPass(
  options: Omit<TranscodingDemoOptions, 'log' | 'workDir'>,
): Promise<void> {
  const lines: string[] = [];
  const result = await runTranscodingDemo({ ...options, workDir, log: (line) => lines.push(line) });
  const timeline = lines.join('\n');
  expect(
    result.checks.map((c) => c.name),
    timeline,
  ).toEqual(CHECKS);
  expect(
    result.checks.filter((c) => !c.ok),
    timeline,
  ).toEqual([]);
  expect(result.ok).toBe(true);

  // The fault really fired on the chosen object, and the zombie's upload lost to a strictly higher token.
  const stall = result.stall;
  const { rendition, segment } = TRANSCODING_DEMO.stalled;
  expect(stall?.key).toMatch(new RegExp(`/${rendition}/seg-${String(segment).padStart(3, '0')}\\.mp4$`));
  expect(stall?.outcome).toBe('refused');
  expect(stall?.errorCode).toBe('LEASE_LOST');
  expect(typeof stall?.currentToken).toBe('bigint');
  expect((stall?.currentToken ?? 0n) > (stall?.token ?? 0n)).toBe(true);
  expect(timeline).toMatch(/RECLAIMED seg-001@240p: epoch \d+, token \d+/);
  expect(timeline).toMatch(/REFUSED 240p\/seg-001\.mp4 token \d+ from worker-\d/);

  // Two playable renditions, each with one video and one audio stream, as long as the 6 s input.
  expect(result.outputs.map((o) => [o.rendition, o.videoStreams, o.audioStreams, o.height])).toEqual([
    ['240p', 1, 1, 240],
    ['120p', 1, 1, 120],
  ]);
  for (const o of result.outputs) expect(o.durationS).toBeCloseTo(6, 0);
}

describe('transcoding example', () => {
  describe('on real PostgreSQL', () => {
    const databaseUrl = useTestDatabase('transcoding');
    it("reclaims the stalled transcode, refuses the zombie's late upload and assembles playable outputs", async () => {
      await expectEveryCheckToPass({ databaseUrl: databaseUrl() });
    }, 300_000);
  });

  describe('on the embedded database', () => {
    it("reclaims the stalled transcode, refuses the zombie's late upload and assembles playable outputs", async () => {
      await expectEveryCheckToPass({});
      // In memory, as the other examples and `pnpm demo` promise: only the media files are on disk.
      expect((await readdir(workDir)).sort()).toEqual(['input', 'runs']);
    }, 300_000);
  });

  it("kills ffmpeg as soon as the attempt's signal fires", async () => {
    const controller = new AbortController();
    let pid: number | undefined;
    const reason = new AttemptAbortedError('lease-lost', 'superseded in a test');
    // A 60 s encode paced at real time: it can only end this quickly by being killed.
    const encoding = runFfmpeg(
      ['-re', '-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=25:duration=60', '-f', 'null', '-'],
      {
        signal: controller.signal,
        onSpawn: (p) => (pid = p),
        onProgress: () => controller.abort(reason),
      },
    );
    const startedAt = performance.now();
    await expect(encoding).rejects.toBe(reason);
    expect(performance.now() - startedAt).toBeLessThan(5_000);
    expect(pid).toBeTypeOf('number');
    // The child was reaped: its pid no longer names a process.
    expect(() => process.kill(pid ?? -1, 0)).toThrow(expect.objectContaining({ code: 'ESRCH' }) as Error);
  }, 30_000);
});
