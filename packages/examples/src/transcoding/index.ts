/**
 * Example: video transcoding. A workflow probes a real clip, splits it into segments, transcodes each segment to
 * two renditions in parallel (ffmpeg, killed when the attempt's signal fires) and assembles playable outputs and a
 * manifest in an object store that refuses writes from superseded attempts — while one worker's network is cut
 * mid-upload and its late upload is refused. See `runTranscodingDemo`.
 * @module
 */
export {
  createTranscodingActivities,
  TRANSCODING_ACTIVITY_DEFAULTS,
  type TranscodingActivities,
  type TranscodingActivityOptions,
  type TranscodingEnvironment,
  type TranscodingEvent,
} from './activities.js';
export { verifyTranscoding, type DemoCheck, type VerifiedOutput, type VerifyInput } from './checks.js';
export {
  FFMPEG_PATH,
  FFMPEG_VERSION,
  decodeMedia,
  probeMedia,
  runFfmpeg,
  type DecodeResult,
  type FfmpegProgress,
  type MediaInfo,
  type MediaStream,
  type RunFfmpegOptions,
} from './ffmpeg.js';
export { NetworkLink, linkPglite, linkPostgres } from '../shared/network-link.js';
export { linkStore, type LinkStoreOptions } from './store-link.js';
export { ObjectStore, type Refusal, type StoreClient, type StoredObject } from './object-store.js';
export {
  TRANSCODING_DEMO,
  runTranscodingDemo,
  type TranscodingDemoOptions,
  type TranscodingDemoResult,
} from './run-demo.js';
export type { Manifest, Rendition, TranscodeJob, TranscodeResult } from './schemas.js';
export { pgliteStoreDatabase, postgresStoreDatabase, type StoreDatabase } from './store-database.js';
export { ensureTestClip, type TestClipSpec } from './test-clip.js';
export { createTranscodeWorkflow, type TranscodeWorkflow } from './workflow.js';
