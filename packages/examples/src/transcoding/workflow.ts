import { defineWorkflow } from '@palisade/sdk';
import type { TranscodingActivities } from './activities.js';
import { transcodeJobSchema, transcodeResultSchema } from './schemas.js';

/**
 * The transcoding workflow: probe the source, split it into segments, transcode every segment to every rendition
 * in parallel (one activity per segment and rendition), then assemble one playable file per rendition and a
 * manifest. Each step is durable: a crash or a lost lease re-runs only the step that was cut short.
 */
export function createTranscodeWorkflow(activities: TranscodingActivities) {
  return defineWorkflow({
    name: 'transcode-video',
    input: transcodeJobSchema,
    output: transcodeResultSchema,
    async run(job, ctx) {
      const source = await ctx.run(activities.probeSource, { sourcePath: job.sourcePath });
      const { segments } = await ctx.run(activities.splitSource, {
        jobId: job.jobId,
        sourcePath: job.sourcePath,
        segmentSeconds: job.segmentSeconds,
      });
      const encoded = await Promise.all(
        segments.flatMap((segment) =>
          job.renditions.map((rendition) =>
            ctx.run(activities.transcodeSegment, {
              jobId: job.jobId,
              segment,
              rendition,
              realtime: job.realtime,
            }),
          ),
        ),
      );
      const { outputs, manifest } = await ctx.run(activities.assembleOutputs, {
        jobId: job.jobId,
        source,
        renditions: job.renditions,
        encoded,
      });
      return { source, segments, encoded, outputs, manifest };
    },
  });
}

/** The workflow {@link createTranscodeWorkflow} returns. */
export type TranscodeWorkflow = ReturnType<typeof createTranscodeWorkflow>;
