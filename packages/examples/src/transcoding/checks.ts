import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import type { AttemptDescription, RunDetails } from '@palisade/engine';
import { decodeMedia, probeMedia, type MediaInfo } from './ffmpeg.js';
import type { ObjectStore } from './object-store.js';
import {
  encodedSegmentSchema,
  manifestSchema,
  segmentSchema,
  type Rendition,
  type TranscodeResult,
} from './schemas.js';
import type { StallRecord } from './stall-fault.js';

/** One verified claim of a demo: what was checked, whether it held, and the evidence. */
export interface DemoCheck {
  readonly name: string;
  readonly ok: boolean;
  readonly detail: string;
}

/** A final output as the checks found it in the store. */
export interface VerifiedOutput {
  readonly rendition: string;
  readonly key: string;
  readonly token: string;
  /** The blob holding its bytes (playable with any player). */
  readonly path: string;
  readonly durationS: number;
  readonly decodedS: number;
  readonly videoStreams: number;
  readonly audioStreams: number;
  readonly width: number;
  readonly height: number;
}

/**
 * The engine's record of the stalled step, as `palisade runs show` lists it: each attempt (epoch, token, worker,
 * outcome) and each write the engine rejected as stale.
 */
export function stalledStepHistory(description: RunDetails, key: string): string[] {
  const step = description.steps.find((s) => encodedSegmentSchema.safeParse(s.output).data?.key === key);
  if (!step) return [`no completed step wrote ${key}`];
  const lines = [...step.attempts]
    .sort((a, b) => a.epoch - b.epoch)
    .map(
      (a) =>
        `epoch ${a.epoch}  token ${a.token.padStart(3)}  ${a.workerId.padEnd(9)} ${a.outcome ?? 'open'}` +
        `${a.durationMs === null ? '' : ` after ${(a.durationMs / 1000).toFixed(2)} s`}`,
    );
  for (const e of description.events) {
    if (e.stepId !== step.id || e.type !== 'attempt:stale-rejected') continue;
    const data = (e.data ?? {}) as { operation?: string; currentToken?: string; reason?: string };
    lines.push(
      `stale ${data.operation ?? 'write'} from token ${e.token} rejected at ${e.at.toISOString()}` +
        ` (${data.reason ?? '?'}; current token ${data.currentToken ?? '?'})`,
    );
  }
  return lines;
}

/** What {@link verifyTranscoding} needs. */
export interface VerifyInput {
  readonly result: TranscodeResult | undefined;
  readonly description: RunDetails;
  readonly store: ObjectStore;
  readonly stall: StallRecord | undefined;
  /** The probed input clip. */
  readonly input: MediaInfo;
  readonly renditions: readonly Rendition[];
  /** How far an output's duration may be from the input's (AAC frames, segment cuts). */
  readonly durationToleranceS: number;
}

const check = (name: string, ok: boolean, detail: string): DemoCheck => ({ name, ok, detail });

/** The token of the attempt the engine recorded as the step's one completion, if any. */
function winningAttempt(attempts: readonly AttemptDescription[]): AttemptDescription | undefined {
  return attempts.find((a) => a.outcome === 'completed');
}

/**
 * Check the demo's claims against the engine's records, the store's manifest and the output files themselves
 * (probed and decoded by ffmpeg), never against the workflow's own say-so.
 */
export async function verifyTranscoding(
  v: VerifyInput,
): Promise<{ checks: DemoCheck[]; outputs: VerifiedOutput[] }> {
  const checks: DemoCheck[] = [];
  const { description, store, stall } = v;
  checks.push(
    check(
      'the run completed',
      description.run.status === 'completed' && v.result !== undefined,
      `run ${description.run.id} is ${description.run.status}`,
    ),
  );

  // key → the token of the completed attempt of the step that wrote it.
  const winners = new Map<string, { token: bigint; step: string }>();
  const stepOf = new Map<string, (typeof description.steps)[number]>();
  for (const step of description.steps) {
    const winner = winningAttempt(step.attempts);
    if (!winner) continue;
    if (step.name === 'transcode-segment') {
      const out = encodedSegmentSchema.safeParse(step.output);
      if (out.success) {
        winners.set(out.data.key, { token: BigInt(winner.token), step: `${step.name}#${step.seq}` });
        stepOf.set(out.data.key, step);
      }
    } else if (step.name === 'split-source') {
      const out = z.object({ segments: z.array(segmentSchema) }).safeParse(step.output);
      for (const s of out.success ? out.data.segments : []) {
        winners.set(s.key, { token: BigInt(winner.token), step: `${step.name}#${step.seq}` });
      }
    }
  }

  // The stalled step: the attempt whose upload stalled lost its lease; a later one on another worker won with a
  // higher token. (Not necessarily epochs 1 and 2: on a loaded machine an earlier attempt may lose its lease too.)
  const stalledStep = stall ? stepOf.get(stall.key) : undefined;
  const attempts = [...(stalledStep?.attempts ?? [])].sort((a, b) => a.epoch - b.epoch);
  const zombie = attempts.find((a) => stall !== undefined && BigInt(a.token) === stall.token);
  const winner = winningAttempt(attempts);
  checks.push(
    check(
      'the stalled transcode lost its lease',
      zombie !== undefined &&
        zombie.workerId === stall?.workerId &&
        (zombie.outcome === 'lease_expired' || zombie.outcome === 'rejected_stale'),
      stall === undefined
        ? 'the fault never fired'
        : zombie === undefined
          ? `no attempt with token ${stall.token} on the stalled step`
          : `epoch ${zombie.epoch} (token ${zombie.token}, ${zombie.workerId}) ended ${zombie.outcome ?? 'never'}`,
    ),
  );
  checks.push(
    check(
      'a reclaimed attempt on another worker won with a higher token',
      stalledStep?.status === 'completed' &&
        winner !== undefined &&
        zombie !== undefined &&
        winner.epoch > zombie.epoch &&
        BigInt(winner.token) > BigInt(zombie.token) &&
        winner.workerId !== zombie.workerId,
      winner === undefined
        ? 'the stalled step has no completed attempt'
        : `epoch ${winner.epoch} (token ${winner.token}, ${winner.workerId}) completed; attempts (epoch:token:outcome): ` +
            attempts.map((a) => `${a.epoch}:${a.token}:${a.outcome ?? 'open'}`).join(', '),
    ),
  );
  const refusals = await store.refusals();
  const recorded = stall && refusals.find((r) => r.key === stall.key && r.token === stall.token);
  checks.push(
    check(
      "the zombie's late upload was refused by the store",
      stall?.outcome === 'refused' &&
        stall.errorCode === 'LEASE_LOST' &&
        recorded !== undefined &&
        typeof stall.currentToken === 'bigint' &&
        stall.currentToken > stall.token,
      stall === undefined
        ? 'the fault never fired'
        : `upload of token ${stall.token} from ${stall.workerId} arrived after the heal: ` +
            `${stall.outcome ?? 'never arrived'}${stall.errorCode ? ` (${stall.errorCode})` : ''}` +
            `${stall.currentToken ? `, the store had accepted token ${stall.currentToken}` : ''}; ` +
            `${refusals.length} refusal(s) in the store's record`,
    ),
  );

  // Every segment object in the store was written by the attempt the engine recorded as the step's completion.
  const mismatches: string[] = [];
  for (const [key, w] of winners) {
    const stored = await store.get(key);
    if (stored?.token !== w.token)
      mismatches.push(`${key}: store ${stored?.token ?? 'none'}, winner ${w.token}`);
  }
  const expectedSegments = (v.result?.segments.length ?? 0) * (1 + v.renditions.length);
  checks.push(
    check(
      'every segment in the store is from its winning token',
      mismatches.length === 0 && winners.size === expectedSegments && expectedSegments > 0,
      mismatches.length > 0
        ? mismatches.join('; ')
        : `${winners.size} segment objects (source and encoded), each at its step's completed token`,
    ),
  );

  // The manifest the workflow wrote lists every segment of every rendition, each from its winning token.
  const manifestObject = v.result ? await store.get(v.result.manifest.key) : undefined;
  const manifest = manifestObject
    ? manifestSchema.safeParse(JSON.parse(await readFile(manifestObject.path, 'utf8')))
    : undefined;
  const listed = manifest?.success ? manifest.data.renditions.flatMap((r) => r.segments) : [];
  const wrong = listed.filter((s) => winners.get(s.key)?.token.toString() !== s.token);
  checks.push(
    check(
      'the manifest lists every segment of every rendition from the winning token',
      manifest?.success === true &&
        manifest.data.renditions.length === v.renditions.length &&
        listed.length === (v.result?.segments.length ?? -1) * v.renditions.length &&
        wrong.length === 0,
      manifest === undefined
        ? 'no manifest in the store'
        : !manifest.success
          ? `manifest does not parse: ${manifest.error.message}`
          : `${manifest.data.renditions.length} renditions × ${listed.length / Math.max(1, manifest.data.renditions.length)} segments` +
            (wrong.length > 0
              ? `; wrong tokens: ${wrong.map((s) => s.key).join(', ')}`
              : ', all at winning tokens'),
    ),
  );

  // The outputs themselves, probed and decoded from the store's blobs.
  const outputs: VerifiedOutput[] = [];
  const decodeErrors: string[] = [];
  for (const rendition of v.renditions) {
    const entry = manifest?.success
      ? manifest.data.renditions.find((r) => r.rendition === rendition.name)
      : undefined;
    const stored = entry ? await store.get(entry.key) : undefined;
    if (!entry || !stored) continue;
    const info = await probeMedia(stored.path);
    const decoded = await decodeMedia(stored.path);
    const video = info.streams.filter((s) => s.type === 'video');
    outputs.push({
      rendition: rendition.name,
      key: stored.key,
      token: stored.token.toString(),
      path: stored.path,
      durationS: info.durationS,
      decodedS: decoded.decodedS,
      videoStreams: video.length,
      audioStreams: info.streams.filter((s) => s.type === 'audio').length,
      width: video[0]?.width ?? 0,
      height: video[0]?.height ?? 0,
    });
    if (decoded.errors.length > 0) decodeErrors.push(`${rendition.name}: ${decoded.errors.join(' | ')}`);
  }
  const tol = v.durationToleranceS;
  const all = (p: (o: VerifiedOutput) => boolean): boolean =>
    outputs.length === v.renditions.length && outputs.every(p);
  const list = (f: (o: VerifiedOutput) => string): string =>
    outputs.map((o) => `${o.rendition} ${f(o)}`).join(', ');
  checks.push(
    check(
      "each output's duration matches the input",
      all((o) => Math.abs(o.durationS - v.input.durationS) <= tol),
      `input ${v.input.durationS.toFixed(2)} s; ${list((o) => `${o.durationS.toFixed(2)} s`)} (tolerance ${tol} s)`,
    ),
  );
  checks.push(
    check(
      'each output has one video and one audio stream at its rendition size',
      all(
        (o) =>
          o.videoStreams === 1 &&
          o.audioStreams === 1 &&
          o.height === v.renditions.find((r) => r.name === o.rendition)?.height,
      ),
      list((o) => `${o.width}x${o.height}, ${o.videoStreams} video + ${o.audioStreams} audio`),
    ),
  );
  checks.push(
    check(
      'each output plays from start to end without decoder errors',
      all((o) => Math.abs(o.decodedS - v.input.durationS) <= tol) && decodeErrors.length === 0,
      `${list((o) => `decoded ${o.decodedS.toFixed(2)} s`)}${decodeErrors.length > 0 ? `; ${decodeErrors.join('; ')}` : ''}`,
    ),
  );
  return { checks, outputs };
}
