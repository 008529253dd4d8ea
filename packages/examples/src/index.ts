export {
  DEMO_DIR_PREFIX,
  DEMO_SCHEMA_PREFIX,
  demoTarget,
  dropDemoSchemas,
  makeDemoWorkDir,
  removeDemoWorkDir,
  type DemoTarget,
} from './demo-target.js';
export {
  FFMPEG_PATH,
  ObjectStore,
  TRANSCODING_DEMO,
  createTranscodeWorkflow,
  createTranscodingActivities,
  decodeMedia,
  probeMedia,
  runFfmpeg,
  runTranscodingDemo,
  type DemoCheck,
  type TranscodingDemoOptions,
  type TranscodingDemoResult,
} from './transcoding/index.js';
