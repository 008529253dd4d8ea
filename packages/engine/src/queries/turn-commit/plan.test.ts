import { describe, expect, it } from 'vitest';
import type { NewStep } from '../../turn/contract.js';
import { planTurnCommit } from './plan.js';
import { NO_EAGER_DISPATCH, type FusedTurnRef, type TurnRef } from './types.js';

const RUN_ID = '00000000-0000-4000-8000-000000000001';
const STEP_ID = '00000000-0000-4000-8000-00000000000a';

const ref: TurnRef = {
  runId: RUN_ID,
  workflowName: 'order',
  token: 41n,
  nonce: '00000000-0000-4000-8000-0000000000ee',
  attempt: 1,
  wakeCount: 3,
  cancelRequested: false,
  leaseMs: 30_000,
  nowMs: 1_780_000_000_000.75,
};

const fused: FusedTurnRef = {
  runId: RUN_ID,
  workflowName: 'order',
  workerId: 'worker-1',
  turnEpoch: 2,
  turnAttempt: 2,
  wakeCount: 5,
  nowMs: 1_780_000_000_000.75,
  completion: { stepId: STEP_ID, token: 57n, nonce: '00000000-0000-4000-8000-0000000000ef', output: 1 },
};

const timer: NewStep = { seq: 1, kind: 'timer', name: 'sleep', delayMs: 1000, afterDeliveredSeq: 0 };
const child = (key: string | null, cancelled = false): NewStep => ({
  seq: 2,
  kind: 'child',
  name: 'ship',
  childRunId: '00000000-0000-4000-8000-0000000000c1',
  input: null,
  key,
  queue: 'default',
  priority: 0,
  cancellation: 'abandon',
  afterDeliveredSeq: 0,
  ...(cancelled ? { cancelled: true, deliveredSeq: 1 } : {}),
});

describe('planTurnCommit', () => {
  it('switches everything off for a blocked turn that only schedules a timer', () => {
    const plan = planTurnCommit({
      grant: { kind: 'claimed', ref },
      result: { newSteps: [timer], deliveries: [], outcome: { kind: 'blocked' } },
      dispatch: NO_EAGER_DISPATCH,
    });
    expect(plan).toMatchObject({
      fused: undefined,
      runId: RUN_ID,
      wakeCount: 3,
      outcomesAtMs: 1_780_000_000_000,
      ending: false,
      status: null,
      progress: null,
      cancelSensitive: true,
      flowKeyed: false,
      signalsTaken: false,
      byPosition: false,
      rejecting: false,
      startsChildren: false,
      childKeys: false,
      fusedStepId: null,
    });
    expect(plan.steps[0]).toMatchObject({ status: 'scheduled', delay_ms: 1000 });
  });

  it('locks and writes a fused step’s completed step even when the code did not take it', () => {
    const plan = planTurnCommit({
      grant: { kind: 'fused', fused },
      result: { newSteps: [], deliveries: [], outcome: { kind: 'blocked' } },
      dispatch: NO_EAGER_DISPATCH,
    });
    expect(plan.deliveries).toEqual([
      { id: STEP_ID, seq: null, delivered_seq: null, fires_timer: false, signal_id: null },
    ]);
    expect(plan).toMatchObject({ fusedStepId: STEP_ID, wakeCount: 5, cancelSensitive: false });
  });

  it('settles the taken and the refused signals, and completes a wait by position', () => {
    const plan = planTurnCommit({
      grant: { kind: 'claimed', ref },
      result: {
        newSteps: [
          { seq: 3, kind: 'signal', name: 'go', signalId: '7', deliveredSeq: 2, afterDeliveredSeq: 1 },
        ],
        deliveries: [{ stepId: null, seq: 0, deliveredSeq: 1, firesTimer: false, signalId: '5' }],
        outcome: { kind: 'completed', output: null },
        rejectedSignals: [{ signalId: '9', seq: 0, message: 'bad' }],
      },
      dispatch: NO_EAGER_DISPATCH,
    });
    expect(plan).toMatchObject({
      ending: true,
      status: 'completed',
      output: 'null',
      signalsTaken: true,
      byPosition: true,
      rejecting: true,
      takenSignalsArray: '{5,7}',
      settledSignalsArray: '{5,7,9}',
      cancelSensitive: false,
    });
    expect(plan.steps[0]).toMatchObject({ status: 'completed', signal_id: '7' });
  });

  it('starts a child only when it is not recorded cancelled, and checks keys only for a child started', () => {
    const start = (c: NewStep) =>
      planTurnCommit({
        grant: { kind: 'claimed', ref },
        result: { newSteps: [c], deliveries: [], outcome: { kind: 'blocked' } },
        dispatch: NO_EAGER_DISPATCH,
      });
    expect(start(child(null))).toMatchObject({ startsChildren: true, childKeys: false });
    expect(start(child('k'))).toMatchObject({ startsChildren: true, childKeys: true });
    expect(start(child('k', true))).toMatchObject({ startsChildren: false, childKeys: false });
  });
});
