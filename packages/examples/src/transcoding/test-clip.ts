import { mkdir, rename, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { runFfmpeg } from './ffmpeg.js';

/** The input clip the demo generates once with ffmpeg's test sources. */
export interface TestClipSpec {
  /** @defaultValue 6 */
  readonly durationS: number;
  /** @defaultValue 320 */
  readonly width: number;
  /** @defaultValue 240 */
  readonly height: number;
  /** @defaultValue 25 */
  readonly fps: number;
}

export const TEST_CLIP_DEFAULTS: TestClipSpec = Object.freeze({
  durationS: 6,
  width: 320,
  height: 240,
  fps: 25,
});

/** Where the clip of `spec` is cached under `dir`. */
export function testClipName(spec: TestClipSpec = TEST_CLIP_DEFAULTS): string {
  return `testsrc-${spec.durationS}s-${spec.width}x${spec.height}-${spec.fps}fps.mp4`;
}

/**
 * Make sure `file` holds a real H.264 + AAC clip: ffmpeg's `testsrc` pattern (a counter, a moving gradient) and a
 * 440 Hz sine, with a keyframe every second so it can be split into whole seconds without re-encoding. Generated
 * on first use (about 100 KB for the defaults, in well under a second) and reused afterwards.
 * @returns whether it was generated now (false: it was already there).
 */
export async function ensureTestClip(
  file: string,
  spec: TestClipSpec = TEST_CLIP_DEFAULTS,
): Promise<boolean> {
  if ((await stat(file).catch(() => undefined))?.isFile()) return false;
  await mkdir(dirname(file), { recursive: true });
  const partial = `${file}.${process.pid}.partial.mp4`;
  const { durationS, width, height, fps } = spec;
  await runFfmpeg([
    ...['-v', 'error', '-y'],
    ...['-f', 'lavfi', '-i', `testsrc=size=${width}x${height}:rate=${fps}:duration=${durationS}`],
    ...['-f', 'lavfi', '-i', `sine=frequency=440:sample_rate=44100:duration=${durationS}`],
    ...['-c:v', 'libx264', '-preset', 'veryfast', '-pix_fmt', 'yuv420p'],
    ...['-g', String(fps), '-keyint_min', String(fps), '-sc_threshold', '0'],
    ...['-c:a', 'aac', '-b:a', '64k', '-shortest', '-movflags', '+faststart'],
    partial,
  ]);
  // Readers never see a half-written clip: a crash leaves only the .partial file behind.
  await rename(partial, file);
  return true;
}
