import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { ApplicationFailure, defineActivity, type ActivityContext, type RetryPolicy } from '@palisade/sdk';
import { probeMedia, runFfmpeg, type FfmpegProgress } from './ffmpeg.js';
import type { StoreClient } from './object-store.js';
import {
  encodedSegmentSchema,
  outputSchema,
  renditionSchema,
  segmentSchema,
  sourceInfoSchema,
  tokenSchema,
  type EncodedSegment,
  type Manifest,
  type Output,
  type Segment,
} from './schemas.js';

/** What an activity reports as it works (for logs and the demo's timeline). */
export type TranscodingEvent =
  | {
      readonly type: 'attempt:started';
      readonly workerId: string;
      readonly stepId: string;
      readonly activity: string;
      /** Human name of the step's work, e.g. `seg-001@240p`. */
      readonly label: string;
      readonly epoch: number;
      readonly token: bigint;
      /** The heartbeat details the previous attempt of this step left, if any. */
      readonly previous: unknown;
    }
  | {
      readonly type: 'attempt:progress';
      readonly workerId: string;
      readonly stepId: string;
      readonly label: string;
      readonly token: bigint;
      /** 0–100. */
      readonly percent: number;
    };

/** Where the activities find their resources; one value serves every worker of a process. */
export interface TranscodingEnvironment {
  /** The object store as the worker `workerId` reaches it. */
  store(workerId: string): StoreClient;
  /** A scratch directory on the worker's own disk. */
  scratchDir(workerId: string): string;
  /** Observes what the activities do; optional. */
  onEvent?(event: TranscodingEvent): void;
}

/** Options of {@link createTranscodingActivities}. */
export interface TranscodingActivityOptions {
  /** Lease of every attempt; at least 3 s (lower only with `unsafeTestTimings()` on the worker). @defaultValue 3_000 (ms) */
  readonly leaseMs?: number;
  readonly retry?: RetryPolicy;
}

/** Defaults of {@link TranscodingActivityOptions}. */
export const TRANSCODING_ACTIVITY_DEFAULTS = Object.freeze({
  leaseMs: 3_000,
  retry: Object.freeze({ initialIntervalMs: 200, maximumIntervalMs: 2_000, maximumAttempts: 10 }),
});

/** Progress heartbeats are sent at most this often (ms). */
const PROGRESS_EVERY_MS = 200;

const pad = (n: number): string => String(n).padStart(3, '0');

/**
 * The four activities of the transcoding workflow — probe, split, transcode, assemble. Every file they produce is
 * written to the object store fenced with the attempt's token (`ctx.info.fencing.token`); every ffmpeg they run is
 * killed when the attempt's signal fires.
 */
export function createTranscodingActivities(
  env: TranscodingEnvironment,
  options: TranscodingActivityOptions = {},
) {
  const common = {
    leaseMs: options.leaseMs ?? TRANSCODING_ACTIVITY_DEFAULTS.leaseMs,
    retry: options.retry ?? TRANSCODING_ACTIVITY_DEFAULTS.retry,
    startToCloseTimeoutMs: 60_000,
  };

  function started(ctx: ActivityContext, label: string): void {
    env.onEvent?.({
      type: 'attempt:started',
      workerId: ctx.info.workerId,
      stepId: ctx.info.stepId,
      activity: ctx.info.activityName,
      label,
      epoch: ctx.info.epoch,
      token: ctx.info.fencing.token,
      previous: ctx.info.heartbeatDetails,
    });
  }

  /** Heartbeat `percent` (throttled) with details a later attempt could resume from, and report it. */
  function progress(ctx: ActivityContext, label: string): (percent: number, force?: boolean) => void {
    let lastAt = -Infinity;
    return (percent, force = false) => {
      const now = performance.now();
      if (!force && now - lastAt < PROGRESS_EVERY_MS) return;
      lastAt = now;
      // Not awaited: the worker renews leases on its own; a rejected heartbeat also fires ctx.signal, which is
      // what stops the work (and kills ffmpeg), so the rejection itself needs no handling here.
      ctx.heartbeat({ label, percent }).catch(() => undefined);
      env.onEvent?.({
        type: 'attempt:progress',
        workerId: ctx.info.workerId,
        stepId: ctx.info.stepId,
        label,
        token: ctx.info.fencing.token,
        percent,
      });
    };
  }

  async function scratch(ctx: ActivityContext, ...parts: string[]): Promise<string> {
    const dir = join(env.scratchDir(ctx.info.workerId), ...parts);
    await mkdir(dir, { recursive: true });
    return dir;
  }

  const probeSource = defineActivity({
    name: 'probe-source',
    input: z.object({ sourcePath: z.string() }),
    output: sourceInfoSchema,
    ...common,
    async run({ sourcePath }, ctx) {
      started(ctx, 'probe');
      const info = await probeMedia(sourcePath);
      const video = info.streams.find((s) => s.type === 'video');
      const audio = info.streams.find((s) => s.type === 'audio');
      if (!video?.width || !video.height) {
        throw ApplicationFailure.nonRetryable(`${sourcePath} has no video stream`, 'NoVideo');
      }
      return {
        durationS: info.durationS,
        width: video.width,
        height: video.height,
        videoCodec: video.codec,
        audioCodec: audio?.codec ?? null,
        streams: info.streams.length,
      };
    },
  });

  const splitSource = defineActivity({
    name: 'split-source',
    input: z.object({ jobId: z.string(), sourcePath: z.string(), segmentSeconds: z.number().positive() }),
    output: z.object({ segments: z.array(segmentSchema).min(1) }),
    ...common,
    async run({ jobId, sourcePath, segmentSeconds }, ctx) {
      started(ctx, 'split');
      const token = ctx.info.fencing.token;
      const dir = await scratch(ctx, jobId, `split@${token}`);
      // Stream copy: cuts fall on keyframes, nothing is re-encoded, so this is quick and lossless.
      await runFfmpeg(
        [
          ...['-v', 'error', '-y', '-i', sourcePath, '-map', '0', '-c', 'copy'],
          ...['-f', 'segment', '-segment_time', String(segmentSeconds), '-reset_timestamps', '1'],
          join(dir, 'seg-%03d.mp4'),
        ],
        { signal: ctx.signal },
      );
      const files = (await readdir(dir)).filter((f) => /^seg-\d{3}\.mp4$/.test(f)).sort();
      const report = progress(ctx, 'split');
      const segments: Segment[] = [];
      for (const [index, file] of files.entries()) {
        const { durationS } = await probeMedia(join(dir, file));
        const key = `jobs/${jobId}/source/seg-${pad(index)}.mp4`;
        ctx.signal.throwIfAborted();
        const stored = await env.store(ctx.info.workerId).put(key, join(dir, file), token);
        segments.push({ index, key, token: stored.token.toString(), durationS });
        report(Math.round(((index + 1) / files.length) * 100), index === files.length - 1);
      }
      return { segments };
    },
  });

  const transcodeSegment = defineActivity({
    name: 'transcode-segment',
    input: z.object({
      jobId: z.string(),
      segment: segmentSchema,
      rendition: renditionSchema,
      realtime: z.boolean(),
    }),
    output: encodedSegmentSchema,
    ...common,
    async run({ jobId, segment, rendition, realtime }, ctx): Promise<EncodedSegment> {
      const label = `seg-${pad(segment.index)}@${rendition.name}`;
      started(ctx, label);
      const store = env.store(ctx.info.workerId);
      const source = await store.get(segment.key);
      if (!source) {
        throw ApplicationFailure.nonRetryable(
          `source segment ${segment.key} is not in the store`,
          'MissingSegment',
        );
      }
      const token = ctx.info.fencing.token;
      const out = join(await scratch(ctx, jobId), `${rendition.name}-seg-${pad(segment.index)}@${token}.mp4`);
      const report = progress(ctx, label);
      await runFfmpeg(
        [
          ...(realtime ? ['-re'] : []),
          ...['-v', 'error', '-y', '-i', source.path, '-vf', `scale=-2:${rendition.height}`],
          ...['-c:v', 'libx264', '-preset', 'veryfast', '-pix_fmt', 'yuv420p'],
          ...['-b:v', `${rendition.videoKbps}k`, '-maxrate', `${rendition.videoKbps}k`],
          ...['-bufsize', `${rendition.videoKbps * 2}k`],
          ...['-c:a', 'aac', '-b:a', `${rendition.audioKbps}k`, '-movflags', '+faststart', out],
        ],
        {
          signal: ctx.signal,
          onProgress: (p: FfmpegProgress) =>
            report(Math.min(100, Math.round((p.outTimeMs / (segment.durationS * 1000)) * 100)), p.done),
        },
      );
      const { durationS } = await probeMedia(out);
      // As far as this worker can tell it still owns the step; the store does not take its word for it, and
      // checks the token itself — the upload may arrive long after this line.
      ctx.signal.throwIfAborted();
      const stored = await store.put(
        `jobs/${jobId}/${rendition.name}/seg-${pad(segment.index)}.mp4`,
        out,
        token,
      );
      return {
        rendition: rendition.name,
        index: segment.index,
        key: stored.key,
        token: stored.token.toString(),
        bytes: stored.bytes,
        sha256: stored.sha256,
        durationS,
      };
    },
  });

  const assembleOutputs = defineActivity({
    name: 'assemble-outputs',
    input: z.object({
      jobId: z.string(),
      source: sourceInfoSchema,
      renditions: z.array(renditionSchema),
      encoded: z.array(encodedSegmentSchema),
    }),
    output: z.object({
      outputs: z.array(outputSchema),
      manifest: z.object({ key: z.string(), token: tokenSchema }),
    }),
    ...common,
    async run({ jobId, source, renditions, encoded }, ctx) {
      started(ctx, 'assemble');
      const store = env.store(ctx.info.workerId);
      const token = ctx.info.fencing.token;
      const dir = await scratch(ctx, jobId, `assemble@${token}`);
      const report = progress(ctx, 'assemble');
      const outputs: Output[] = [];
      const manifest: Manifest = { jobId, source, renditions: [] };
      for (const [i, rendition] of renditions.entries()) {
        const parts = encoded.filter((e) => e.rendition === rendition.name).sort((a, b) => a.index - b.index);
        const paths: string[] = [];
        for (const part of parts) {
          const stored = await store.get(part.key);
          // The store must hold exactly what the attempt the engine recorded as completed uploaded.
          if (stored?.token.toString() !== part.token || stored.sha256 !== part.sha256) {
            throw ApplicationFailure.nonRetryable(
              `${part.key} in the store is token ${stored?.token ?? 'none'}, not the completed attempt's ${part.token}`,
              'SegmentMismatch',
            );
          }
          paths.push(stored.path);
        }
        const list = join(dir, `${rendition.name}.txt`);
        await writeFile(list, paths.map((p) => `file '${p.replaceAll("'", "'\\''")}'\n`).join(''));
        const out = join(dir, `${rendition.name}.mp4`);
        await runFfmpeg(
          [
            '-v',
            'error',
            '-y',
            '-f',
            'concat',
            '-safe',
            '0',
            '-i',
            list,
            '-c',
            'copy',
            '-movflags',
            '+faststart',
            out,
          ],
          { signal: ctx.signal },
        );
        const info = await probeMedia(out);
        const video = info.streams.filter((s) => s.type === 'video');
        ctx.signal.throwIfAborted();
        const stored = await store.put(`jobs/${jobId}/${rendition.name}.mp4`, out, token);
        const output: Output = {
          rendition: rendition.name,
          key: stored.key,
          token: stored.token.toString(),
          bytes: stored.bytes,
          durationS: info.durationS,
          width: video[0]?.width ?? 0,
          height: video[0]?.height ?? 0,
          videoStreams: video.length,
          audioStreams: info.streams.filter((s) => s.type === 'audio').length,
        };
        outputs.push(output);
        manifest.renditions.push({
          ...output,
          segments: parts.map(({ index, key, token: t, sha256, durationS }) => ({
            index,
            key,
            token: t,
            sha256,
            durationS,
          })),
        });
        report(Math.round(((i + 1) / (renditions.length + 1)) * 100));
      }
      const manifestFile = join(dir, 'manifest.json');
      await writeFile(manifestFile, `${JSON.stringify(manifest, null, 2)}\n`);
      ctx.signal.throwIfAborted();
      const stored = await store.put(`jobs/${jobId}/manifest.json`, manifestFile, token);
      report(100, true);
      return { outputs, manifest: { key: stored.key, token: stored.token.toString() } };
    },
  });

  return { probeSource, splitSource, transcodeSegment, assembleOutputs } as const;
}

/** The activities {@link createTranscodingActivities} returns. */
export type TranscodingActivities = ReturnType<typeof createTranscodingActivities>;
