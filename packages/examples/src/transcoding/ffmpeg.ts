/**
 * ffmpeg as a child process: the binary from the `@ffmpeg-installer/ffmpeg` npm package (a static Linux, macOS or
 * Windows build installed with the package; no system ffmpeg is needed). Probing uses ffmpeg itself (`ffmpeg -i`),
 * so ffprobe is not needed either.
 */
import { spawn } from 'node:child_process';
import ffmpegInstaller from '@ffmpeg-installer/ffmpeg';

/** Absolute path of the ffmpeg binary shipped by `@ffmpeg-installer/ffmpeg`. */
export const FFMPEG_PATH: string = ffmpegInstaller.path;
/** Version string of that binary, as the package reports it. */
export const FFMPEG_VERSION: string = ffmpegInstaller.version;

/** One `-progress` report of a running ffmpeg. */
export interface FfmpegProgress {
  /** Media time written so far (ms). */
  readonly outTimeMs: number;
  /** True on the last report (`progress=end`). */
  readonly done: boolean;
}

/** Options of {@link runFfmpeg}. */
export interface RunFfmpegOptions {
  /** Kills ffmpeg with SIGKILL when it fires; the returned promise then rejects with `signal.reason`. */
  readonly signal?: AbortSignal;
  /** Called for each progress report (ffmpeg sends one about every 0.5 s, and one at the end). */
  readonly onProgress?: (progress: FfmpegProgress) => void;
  /** Called once with the child's pid, as soon as it is spawned. */
  readonly onSpawn?: (pid: number) => void;
}

/** What a finished ffmpeg printed on stderr (the last 16 KiB). */
export interface FfmpegResult {
  readonly stderr: string;
}

const STDERR_KEEP = 16 * 1024;

/**
 * Run ffmpeg with `args` (after `-hide_banner -nostdin`), reporting progress if `onProgress` is given (the args
 * then get `-progress pipe:1 -nostats`). Resolves when it exits with code 0.
 * @throws Error with the exit code and the tail of stderr when ffmpeg fails; `signal.reason` when aborted.
 */
export async function runFfmpeg(
  args: readonly string[],
  options: RunFfmpegOptions = {},
): Promise<FfmpegResult> {
  const { code, killedBy, stderr } = await execFfmpeg(args, options);
  if (code === 0) return { stderr };
  const how = killedBy ? `was killed by ${killedBy}` : `exited with code ${code}`;
  throw new Error(`ffmpeg ${how}: ${lastLines(stderr, 5)} (args: ${args.join(' ')})`);
}

interface FfmpegExit {
  readonly code: number | null;
  readonly killedBy: NodeJS.Signals | null;
  readonly stderr: string;
}

/** Spawn ffmpeg and resolve with however it exited; rejects only on spawn errors and aborts. */
function execFfmpeg(args: readonly string[], options: RunFfmpegOptions): Promise<FfmpegExit> {
  const { signal, onProgress } = options;
  if (signal?.aborted) return Promise.reject(abortReason(signal));
  const progressArgs = onProgress ? ['-progress', 'pipe:1', '-nostats'] : [];
  return new Promise<FfmpegExit>((resolve, reject) => {
    const child = spawn(FFMPEG_PATH, ['-hide_banner', '-nostdin', ...progressArgs, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    if (child.pid !== undefined) options.onSpawn?.(child.pid);
    let stderr = '';
    let stdout = '';
    let outTimeMs = 0;
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-STDERR_KEEP);
    });
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      let newline: number;
      while ((newline = stdout.indexOf('\n')) >= 0) {
        const line = stdout.slice(0, newline).trim();
        stdout = stdout.slice(newline + 1);
        const eq = line.indexOf('=');
        if (eq < 0) continue;
        const key = line.slice(0, eq);
        const value = line.slice(eq + 1);
        if (key === 'out_time') outTimeMs = parseClockMs(value) ?? outTimeMs;
        else if (key === 'progress') onProgress?.({ outTimeMs, done: value === 'end' });
      }
    });
    // The attempt lost its lease (or is shutting down): the encoder must stop at once, not finish a file that
    // nobody may upload. SIGKILL, because SIGTERM lets ffmpeg flush and finalize its output first.
    const onAbort = (): void => {
      child.kill('SIGKILL');
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    child.once('error', (error) => {
      signal?.removeEventListener('abort', onAbort);
      reject(error);
    });
    child.once('close', (code, killedBy) => {
      signal?.removeEventListener('abort', onAbort);
      if (signal?.aborted) reject(abortReason(signal));
      else resolve({ code, killedBy, stderr });
    });
  });
}

function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new Error(`aborted: ${String(reason)}`);
}

function lastLines(text: string, n: number): string {
  return text.trim().split('\n').slice(-n).join(' | ');
}

/** `HH:MM:SS.micro` as ms, or undefined (ffmpeg prints `N/A` before the first frame). */
export function parseClockMs(value: string): number | undefined {
  const m = /^(-?)(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$/.exec(value.trim());
  if (!m) return undefined;
  const ms = (Number(m[2]) * 3600 + Number(m[3]) * 60 + Number(m[4])) * 1000;
  return m[1] === '-' ? -ms : ms;
}

/** One stream of a probed file. */
export interface MediaStream {
  readonly index: number;
  readonly type: 'video' | 'audio' | 'other';
  readonly codec: string;
  readonly width?: number;
  readonly height?: number;
  readonly sampleRateHz?: number;
}

/** What {@link probeMedia} reads from a file's header. */
export interface MediaInfo {
  /** Container duration in seconds (ffmpeg rounds it to 10 ms). */
  readonly durationS: number;
  readonly streams: readonly MediaStream[];
}

/**
 * Read a media file's duration and streams from the header ffmpeg prints for `ffmpeg -i <file>` (which exits
 * with an error because no output is given; that is expected).
 * @throws Error when the file is missing or ffmpeg cannot read it.
 */
export async function probeMedia(file: string): Promise<MediaInfo> {
  const { stderr } = await execFfmpeg(['-i', file], {});
  const duration = /Duration: (\d+:\d{2}:\d{2}(?:\.\d+)?)/.exec(stderr);
  const durationMs = duration?.[1] ? parseClockMs(duration[1]) : undefined;
  if (durationMs === undefined) {
    throw new Error(`probe of ${file} failed: ffmpeg printed no duration (${lastLines(stderr, 3)})`);
  }
  const streams: MediaStream[] = [];
  for (const m of stderr.matchAll(
    /Stream #0:(\d+)(?:\[\w+\])?(?:\(\w+\))?: (Video|Audio|\w+): (\w+)([^\n]*)/g,
  )) {
    const [, index, kind, codec, rest = ''] = m;
    const type = kind === 'Video' ? 'video' : kind === 'Audio' ? 'audio' : 'other';
    const size = type === 'video' ? /, (\d{2,5})x(\d{2,5})/.exec(rest) : null;
    const rate = type === 'audio' ? /, (\d+) Hz/.exec(rest) : null;
    streams.push({
      index: Number(index),
      type,
      codec: codec ?? 'unknown',
      ...(size ? { width: Number(size[1]), height: Number(size[2]) } : {}),
      ...(rate ? { sampleRateHz: Number(rate[1]) } : {}),
    });
  }
  return { durationS: durationMs / 1000, streams };
}

/** What {@link decodeMedia} found. */
export interface DecodeResult {
  /** Media time decoded to the end, in seconds. */
  readonly decodedS: number;
  /** Decoder errors ffmpeg reported (empty for a clean file). */
  readonly errors: readonly string[];
}

/**
 * Decode every stream of `file` to nowhere (`-f null`) and report the decoded length and any decoder errors:
 * the check that a file is playable from start to end, not merely that its header parses.
 * @throws Error when ffmpeg cannot open the file.
 */
export async function decodeMedia(file: string): Promise<DecodeResult> {
  let decodedMs = 0;
  const { stderr } = await runFfmpeg(['-v', 'error', '-i', file, '-f', 'null', '-'], {
    onProgress: (p) => (decodedMs = Math.max(decodedMs, p.outTimeMs)),
  });
  const errors = stderr
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0);
  return { decodedS: decodedMs / 1000, errors };
}
