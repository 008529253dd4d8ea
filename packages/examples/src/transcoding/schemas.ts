import { z } from 'zod';

/** A fencing token as it travels in JSON: a decimal string (tokens are 64-bit). */
export const tokenSchema = z.string().regex(/^\d+$/, 'must be a decimal fencing token');

/** One output quality: the frame height and the bitrates to encode at. */
export const renditionSchema = z.object({
  /** Used in object keys, e.g. `240p`. */
  name: z.string().regex(/^[a-z0-9]+$/),
  /** Frame height in pixels (even); the width follows the source's aspect ratio. */
  height: z.number().int().positive().multipleOf(2),
  videoKbps: z.number().int().positive(),
  audioKbps: z.number().int().positive(),
});
export type Rendition = z.infer<typeof renditionSchema>;

/** A transcoding job: the workflow's input. */
export const transcodeJobSchema = z.object({
  /** Names the job's objects (`jobs/<jobId>/…`). */
  jobId: z.string().regex(/^[a-z0-9][a-z0-9-]*$/),
  /** The uploaded source file, on storage every worker can read. */
  sourcePath: z.string().min(1),
  /** Target segment length; cuts fall on the source's keyframes. */
  segmentSeconds: z.number().positive(),
  renditions: z.array(renditionSchema).min(2),
  /** Encode at 1× real time (ffmpeg `-re`), so that progress is visible on a short clip. */
  realtime: z.boolean(),
});
export type TranscodeJob = z.infer<typeof transcodeJobSchema>;

/** What probing the source found. */
export const sourceInfoSchema = z.object({
  durationS: z.number().positive(),
  width: z.number().int().positive(),
  height: z.number().int().positive(),
  videoCodec: z.string(),
  audioCodec: z.string().nullable(),
  streams: z.number().int().positive(),
});
export type SourceInfo = z.infer<typeof sourceInfoSchema>;

/** One source segment, as the split step put it in the store. */
export const segmentSchema = z.object({
  index: z.number().int().min(0),
  key: z.string(),
  token: tokenSchema,
  durationS: z.number().positive(),
});
export type Segment = z.infer<typeof segmentSchema>;

/** One transcoded segment, as the transcode step put it in the store. */
export const encodedSegmentSchema = z.object({
  rendition: z.string(),
  index: z.number().int().min(0),
  key: z.string(),
  token: tokenSchema,
  bytes: z.number().int().positive(),
  sha256: z.string(),
  durationS: z.number().positive(),
});
export type EncodedSegment = z.infer<typeof encodedSegmentSchema>;

/** One assembled output file. */
export const outputSchema = z.object({
  rendition: z.string(),
  key: z.string(),
  token: tokenSchema,
  bytes: z.number().int().positive(),
  durationS: z.number().positive(),
  width: z.number().int().positive(),
  height: z.number().int().positive(),
  videoStreams: z.number().int(),
  audioStreams: z.number().int(),
});
export type Output = z.infer<typeof outputSchema>;

/** The manifest the assemble step writes next to the outputs (`jobs/<jobId>/manifest.json`). */
export const manifestSchema = z.object({
  jobId: z.string(),
  source: sourceInfoSchema,
  renditions: z.array(
    outputSchema.extend({
      segments: z.array(
        encodedSegmentSchema.pick({ index: true, key: true, token: true, sha256: true, durationS: true }),
      ),
    }),
  ),
});
export type Manifest = z.infer<typeof manifestSchema>;

/** The workflow's output. */
export const transcodeResultSchema = z.object({
  source: sourceInfoSchema,
  segments: z.array(segmentSchema),
  encoded: z.array(encodedSegmentSchema),
  outputs: z.array(outputSchema),
  manifest: z.object({ key: z.string(), token: tokenSchema }),
});
export type TranscodeResult = z.infer<typeof transcodeResultSchema>;
