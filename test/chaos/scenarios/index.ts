/** Every chaos scenario, in the order `pnpm chaos` and the CI subset run them. Add new ones here. */
import type { Scenario } from '../harness.js';
import { frozenZombie } from './t02-frozen-zombie.js';
import { blockedLoop } from './t03-blocked-loop.js';
import { sigkill } from './t04-sigkill.js';
import { backendTermination } from './t05-backend-termination.js';
import { lostCommitAck } from './t06-lost-commit-ack.js';
import { partition } from './t07-partition.js';
import { revoke } from './t08-revoke.js';
import { workerClock } from './t09-worker-clock.js';
import { dbClockJump } from './t10-db-clock-jump.js';
import { dbRestart } from './t11-db-restart.js';
import { stalledFencedTransaction } from './t12-stalled-fenced-transaction.js';
import { delayedGrants } from './t13-delayed-grants.js';
import { parameterGuard } from './t14-parameter-guard.js';
import { retryUnderLiveHolder } from './t15-retry-under-live-holder.js';
import { sigkillBatch } from './t16-sigkill-batch.js';
import { sigstopBatch } from './t17-sigstop-batch.js';
import { terminateBatch } from './t18-terminate-batch.js';
import { lostBatchReply } from './t19-lost-batch-reply.js';
import { sigkillEager } from './t20-sigkill-eager.js';
import { sigstopEager } from './t21-sigstop-eager.js';
import { terminateEager } from './t22-terminate-eager.js';
import { lostEagerReply } from './t23-lost-eager-reply.js';
import { fusedStep } from './t24-fused-step.js';
import { signals } from './t25-signals.js';
import { outageUnderLoad } from './t26-outage-under-load.js';
import { fusedEffectCrash } from './t27-fused-effect-crash.js';

export const SCENARIOS: readonly Scenario[] = [
  frozenZombie,
  blockedLoop,
  sigkill,
  backendTermination,
  lostCommitAck,
  partition,
  revoke,
  workerClock,
  dbClockJump,
  dbRestart,
  stalledFencedTransaction,
  delayedGrants,
  parameterGuard,
  retryUnderLiveHolder,
  sigkillBatch,
  sigstopBatch,
  terminateBatch,
  lostBatchReply,
  sigkillEager,
  sigstopEager,
  terminateEager,
  lostEagerReply,
  fusedStep,
  signals,
  outageUnderLoad,
  fusedEffectCrash,
];
