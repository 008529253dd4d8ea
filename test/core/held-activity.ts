/**
 * An activity whose attempts the test drives by hand: each attempt, once started by a worker, waits until the
 * test completes or fails it (or its signal fires), and meanwhile hands its context to the test — so the test
 * can heartbeat or write through a superseded attempt's context exactly as a zombie would.
 *
 *   const held = holdActivity('held');
 *   const first = await held.next();           // the next attempt a worker started
 *   await first.ctx.heartbeat();
 *   first.complete();
 */
import { z } from 'zod';
import {
  defineActivity,
  type ActivityContext,
  type ActivityDefinition,
  type ActivityOptions,
} from '@palisade/sdk';

const input = z.object({ label: z.string().optional() });
const output = z.object({ by: z.string() });

export interface HeldAttempt {
  readonly ctx: ActivityContext;
  readonly token: bigint;
  /** Let the activity return `{ by }`. */
  complete(by?: string): void;
  /** Let the activity throw `error`. */
  fail(error: Error): void;
}

export interface HeldActivity {
  readonly activity: ActivityDefinition<typeof input, typeof output>;
  /** Every attempt started so far, in start order. */
  readonly started: readonly HeldAttempt[];
  /** The next attempt not yet returned by `next()`, once a worker starts it. */
  next(timeoutMs?: number): Promise<HeldAttempt>;
}

export function holdActivity(
  name: string,
  options: Partial<Pick<ActivityOptions<typeof input, typeof output>, 'leaseMs' | 'retry'>> = {},
): HeldActivity {
  const started: HeldAttempt[] = [];
  const waiters: (() => void)[] = [];
  let taken = 0;
  const activity = defineActivity({
    name,
    input,
    output,
    ...options,
    run(_input, ctx) {
      return new Promise<z.input<typeof output>>((resolve, reject) => {
        // Honour the signal, as a well-behaved activity does.
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error), { once: true });
        started.push({
          ctx,
          token: ctx.info.fencing.token,
          complete: (by = `token ${ctx.info.fencing.token}`) => resolve({ by }),
          fail: reject,
        });
        for (const wake of waiters.splice(0)) wake();
      });
    },
  });
  return {
    activity,
    started,
    async next(timeoutMs = 20_000) {
      const deadline = performance.now() + timeoutMs;
      while (started.length <= taken) {
        let timer: NodeJS.Timeout | undefined;
        await new Promise<void>((resolve, reject) => {
          waiters.push(resolve);
          timer = setTimeout(
            () => reject(new Error(`no attempt of ${name} started within ${timeoutMs} ms`)),
            Math.max(0, deadline - performance.now()),
          );
        }).finally(() => clearTimeout(timer));
      }
      return started[taken++] as HeldAttempt;
    },
  };
}
