import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { eq, inArray } from 'drizzle-orm';
import type { RunDetails, RunHandle } from '@palisade/engine';
import { PalisadeError } from '@palisade/sdk';
import { advanceClock, resetClock } from '@palisade/engine/testing';
import type { InvoiceActivityEvent } from '../invoice-settlement/activities.js';
import type { AppDatabase } from '../invoice-settlement/app-database.js';
import type { DemoCheck } from '../invoice-settlement/checks.js';
import { PaymentProvider, createCharge } from '../invoice-settlement/payment-provider.js';
import { StallFault } from '../invoice-settlement/stall-fault.js';
import { quoteIdent } from '../invoice-settlement/tables.js';
import { describeError } from '../invoice-settlement/timeline.js';
import { closeDemoResources, openDemoResources } from '../shared/demo-resources.js';
import { createSupportAgentActivities, type SupportAgentEvent } from './activities.js';
import type { AgentModel } from './agent-model.js';
import { sendDecision, type SentDecision } from './approval-desk.js';
import { verifySupportAgent, type SeenEvent, type WaitSnapshot } from './checks.js';
import { parseInboxData, type Order } from './inbox.js';
import { createOfflineModel } from './offline-model.js';
import { createOpenAiModel, openAiOptionsFromEnv } from './openai-model.js';
import { supportTables, supportTablesDdl, type SupportTables } from './tables.js';
import { Timeline } from './timeline.js';
import { WorkerKill } from './worker-kill.js';
import { createSupportAgentWorkflow, type EmailOutcome, type RefundApproval } from './workflow.js';

/** Options of {@link runSupportAgentDemo}. */
export interface SupportAgentDemoOptions {
  /** A PostgreSQL server to run on. @defaultValue the embedded database (an in-memory PGlite, or `dataDir`) */
  readonly databaseUrl?: string;
  /** Where each line of the live timeline and of the checks goes. @defaultValue `console.log` */
  readonly log?: (line: string) => void;
  /**
   * Schema of the engine's tables; the shop's are in `<schema>_support`, the payment provider's in
   * `<schema>_support_pay` (both made afresh by each run). @defaultValue `support_<random>`
   */
  readonly schema?: string;
  /** Keep the schemas after the run (PostgreSQL only; the embedded database is in memory). @defaultValue false */
  readonly keepSchema?: boolean;
  /** Without `databaseUrl`: an embedded database directory (file-backed, kept, locked to this process). */
  readonly dataDir?: string;
  /**
   * The agent's model. @defaultValue the OpenAI-compatible client when `PALISADE_LLM_BASE_URL` is set (with
   * `PALISADE_LLM_API_KEY`, `PALISADE_LLM_MODEL`), otherwise the offline one (wink-nlp)
   */
  readonly model?: AgentModel;
}

/** What {@link runSupportAgentDemo} found. */
export interface SupportAgentDemoResult {
  /** True when every check passed. */
  readonly ok: boolean;
  readonly database: 'postgres' | 'pglite';
  readonly schema: string;
  /** The run of the email whose worker was killed mid-loop (the one `handle.watch()` streamed). */
  readonly runId: string | undefined;
  /** The run of the email whose refund the zombie tried to write. */
  readonly zombieRunId: string | undefined;
  /** The run whose approval timed out after two days of database time. */
  readonly timedOutRunId: string | undefined;
  readonly checks: readonly DemoCheck[];
  /** By email id: what each run returned. */
  readonly outcomes: ReadonlyMap<string, EmailOutcome>;
  /** The approval decisions sent, and how (the `palisade` CLI, or in process). */
  readonly decisions: readonly (SentDecision & { readonly emailId: string; readonly approved: boolean })[];
  readonly counts: {
    readonly emails: number;
    readonly answered: number;
    readonly escalated: number;
    readonly refunds: number;
    readonly approvalsRequested: number;
  };
  readonly timingsMs: { readonly setup: number; readonly run: number; readonly total: number };
}

const DAY_MS = 86_400_000;

/** The demo's fixed scenario. */
export const SUPPORT_AGENT_DEMO = Object.freeze({
  /** The committed data (generated once by `data/generate-inbox.ts`). */
  ordersPath: fileURLToPath(new URL('../../src/support-agent/data/orders.json', import.meta.url)),
  emailsPath: fileURLToPath(new URL('../../src/support-agent/data/emails.json', import.meta.url)),
  agentWorkers: Object.freeze(['agent-1', 'agent-2', 'agent-3']),
  /**
   * Refund workers (queue `payments`), one attempt at a time each: when one stalls, nothing else of it is caught
   * half-way (see the invoice example's `StallFault`).
   */
  paymentWorkers: Object.freeze(['payments-1', 'payments-2']),
  /**
   * Activity attempts and workflow turns each agent worker runs at once. The embedded database runs one statement at
   * a time, so more in flight would only queue behind it — heartbeats included.
   */
  agentConcurrency: 4,
  /** Refunds above this many cents wait for a person's approval ($250.00). */
  approvalThresholdCents: 25_000,
  /** How long a refund waits for that approval before the email is escalated. */
  approvalTimeoutMs: 2 * DAY_MS,
  /** The email whose worker is killed, as this step of its loop starts. */
  killed: Object.freeze({ emailId: 'EM-0002', tool: 'check_refund_policy' }),
  /** The email whose refund stalls on its first attempt (the zombie). */
  zombieEmail: 'EM-0007',
  /** The approval the person rejects, and the one nobody answers. */
  rejectedEmail: 'EM-0043',
  timedOutEmail: 'EM-0073',
  /** Who approves (the demo's person at the approval desk). */
  approver: 'dana@support.example',
  maxModelTurns: 8,
  /**
   * Lease of every attempt and turn (ms); heartbeats every third, each given as long to answer (a loaded 2-core
   * machine with the embedded database can take a while). A killed worker's steps are reclaimed at most this long
   * after its last heartbeat.
   */
  leaseMs: 6_000,
  heartbeatTimeoutMs: 2_000,
  pollIntervalMs: 250,
  /**
   * Give up waiting for the inbox once nothing moved for this long (ms): no email settled and no decision was sent.
   * Counted from the last progress, not from the start, so a loaded machine that takes longer over the whole inbox
   * is not mistaken for a stuck one (the approvals are sent only once every other run has ended).
   */
  runTimeoutMs: 150_000,
});

/**
 * Run the support-agent example end to end and check it. 112 customer emails about the shop's orders are each
 * handled by a workflow run that loops — the model (offline wink-nlp, or an OpenAI-compatible API) picks a tool, the
 * tool runs as an activity — until the model answers, and the answer goes to the outbox. Refunds go through the
 * invoice example's payment provider (idempotency keys) and a fenced ledger row; those above $250 wait for a
 * person's approval by signal: most are approved (with `palisade runs signal` on PostgreSQL), one rejected, one left
 * to time out after two days of database time, which escalates it. Faults: a worker is killed mid-loop and the run
 * resumes on another without repeating a tool call; a refund worker stalls and its late write is refused. One run's
 * progress is streamed with `handle.watch()`. Prints a live timeline and the checks; never throws for a failed check.
 * @throws only when the database cannot be opened or the data files are invalid (naming the row and field).
 */
export async function runSupportAgentDemo(
  options: SupportAgentDemoOptions = {},
): Promise<SupportAgentDemoResult> {
  const demo = SUPPORT_AGENT_DEMO;
  const log = options.log ?? ((line: string) => console.log(line));
  const database = options.databaseUrl ? 'postgres' : 'pglite';
  const schema = options.schema ?? `support_${randomBytes(4).toString('hex')}`;
  const appSchema = `${schema}_support`;
  const providerSchema = `${schema}_support_pay`;
  const inboxId = `inbox-${randomBytes(3).toString('hex')}`;
  const data = parseInboxData(readFileSync(demo.ordersPath, 'utf8'), readFileSync(demo.emailsPath, 'utf8'));
  const llm = openAiOptionsFromEnv();
  const model = options.model ?? (llm ? createOpenAiModel(llm) : createOfflineModel());
  const emailByRun = new Map<string, string>();
  const spotlight = new Set<string>([demo.killed.emailId, demo.zombieEmail]);
  const timeline = new Timeline(log, data.emails.length, (runId) => {
    const emailId = emailByRun.get(runId);
    return emailId !== undefined && spotlight.has(emailId) ? emailId : undefined;
  });

  const resources = await openDemoResources({
    databaseUrl: options.databaseUrl,
    schema,
    dataDir: options.dataDir,
    workerIds: [...SUPPORT_AGENT_DEMO.agentWorkers, ...SUPPORT_AGENT_DEMO.paymentWorkers],
    applicationName: 'support-agent-demo',
  });
  const emailOfKey = (key: string): string => emailByRun.get(key.split('/')[1] ?? '') ?? key;
  let provider: PaymentProvider | undefined;
  let zombie: StallFault | undefined;
  let clockMoved = false;
  try {
    const app = resources.app;
    // The shop's tables and the provider's are made afresh by every run; the engine's history is kept.
    await app.run([providerSchema, appSchema].map((s) => `DROP SCHEMA IF EXISTS ${quoteIdent(s)} CASCADE`));
    await app.run(supportTablesDdl(appSchema));
    const tables = supportTables(appSchema);
    const shop = await PaymentProvider.start({ database: app, schema: providerSchema });
    provider = shop;
    await seedOrders(app, tables, shop.url, inboxId, data.orders);
    timeline.watchProvider(shop, emailOfKey);

    const kill = new WorkerKill({ ...demo.killed, links: resources.links, timeline });
    const onEvent = (event: SupportAgentEvent): void => {
      timeline.activity(event);
      if (event.emailId !== demo.zombieEmail) return;
      // The stalled refund's key is known once its first attempt starts: the fault holds the provider's answer to it.
      if (event.type === 'refund:started' && !zombie) {
        zombie = new StallFault({
          invoiceNumber: event.emailId,
          idempotencyKey: event.idempotencyKey,
          provider: shop,
          links: resources.links,
          timeline,
        });
      }
      const adapted = asInvoiceEvent(event);
      if (zombie && adapted) zombie.onActivityEvent(adapted);
    };
    const activities = createSupportAgentActivities(
      {
        tables,
        providerUrl: shop.url,
        model,
        approvalThresholdCents: demo.approvalThresholdCents,
        onEvent,
        beforeStep: kill.beforeStep,
      },
      { leaseMs: demo.leaseMs },
    );
    const { issueRefund, ...agentActivities } = activities;
    const workflow = createSupportAgentWorkflow(activities, {
      approvalThresholdCents: demo.approvalThresholdCents,
      approvalTimeoutMs: demo.approvalTimeoutMs,
    });
    const timing = {
      pollIntervalMs: demo.pollIntervalMs,
      heartbeatTimeoutMs: demo.heartbeatTimeoutMs,
      turnLeaseMs: demo.leaseMs,
    };
    const workers = [...resources.workerEngines].map(([workerId, engine]) => {
      const agent = demo.agentWorkers.includes(workerId);
      const worker = agent
        ? engine.worker({
            workerId,
            workflows: [workflow],
            activities: Object.values(agentActivities),
            concurrency: demo.agentConcurrency,
            workflowConcurrency: demo.agentConcurrency,
            ...timing,
          })
        : engine.worker({
            workerId,
            activities: [issueRefund],
            queues: ['payments'],
            concurrency: 1,
            ...timing,
          });
      timeline.watchWorker(worker, workerId);
      return worker;
    });
    await Promise.all(workers.map((w) => w.start()));
    const setupMs = timeline.elapsedMs();
    timeline.line(
      'setup',
      `${database === 'postgres' ? 'PostgreSQL' : 'embedded PGlite'}, schemas ${schema} (engine), ${appSchema} ` +
        `(${data.orders.length} orders, outbox, refund ledger), ${providerSchema} (provider at ${shop.url}); ` +
        `model: ${model.description}; ${demo.agentWorkers.length} agent workers × ${demo.agentConcurrency}, ` +
        `${demo.paymentWorkers.length} refund workers × 1; lease ${demo.leaseMs} ms`,
    );

    // One run per email, started in one statement; the idempotency keys make a repeated start name the same runs.
    const handles = await resources.main.client.startMany(
      workflow,
      data.emails.map((email) => ({ email, maxModelTurns: demo.maxModelTurns })),
      { keys: data.emails.map((e) => `${inboxId}:${e.id}`) },
    );
    const runOf = new Map<string, RunHandle<EmailOutcome>>();
    for (const [i, email] of data.emails.entries()) {
      const handle = handles[i] as RunHandle<EmailOutcome>;
      runOf.set(email.id, handle);
      emailByRun.set(handle.runId, email.id);
    }
    const runStartedMs = timeline.elapsedMs();
    timeline.line('client', `started ${handles.length} runs of ${workflow.name}, one per email (${inboxId})`);
    const watched = streamProgress(runOf.get(demo.killed.emailId), demo.killed.emailId, timeline);
    const outcomes = new Map<string, EmailOutcome>();
    const settled = new Set<string>();
    const progress = new ProgressClock(demo.runTimeoutMs);
    const finished = data.emails.map(async (email) => {
      try {
        const outcome = await resultUnlessStalled(runOf.get(email.id), progress);
        if (outcome) outcomes.set(email.id, outcome);
      } catch (error) {
        timeline.line('client', `${email.id}: run did not complete: ${describeError(error)}`);
      } finally {
        settled.add(email.id);
        progress.moved();
        timeline.emailDone();
      }
    });

    // The approval desk: wait until every run has either ended or is waiting for a person.
    const pending = await waitForApprovalQueue(app, tables, settled, data.emails.length, progress);
    timeline.line(
      'approvals',
      `${pending.length} refunds above $${(demo.approvalThresholdCents / 100).toFixed(2)} wait for a person: ` +
        pending.map((p) => `${p.emailId} $${(p.amountCents / 100).toFixed(2)}`).join(', '),
    );
    const waits = await Promise.all(pending.map((p) => snapshotWait(runOf.get(p.emailId), p.emailId)));
    for (const w of waits)
      if (!w.noLeaseHeld) timeline.line('approvals', `${w.emailId} holds a lease: ${w.detail}`);
    timeline.line(
      'approvals',
      `all ${waits.length} waits hold no lease: each is an unclaimed signal step, no turn open`,
    );

    const decisions: (SentDecision & { emailId: string; approved: boolean })[] = [];
    const decided = new Map<string, 'approved' | 'rejected' | 'timed-out'>();
    const cli = options.databaseUrl ? { databaseUrl: options.databaseUrl, schema } : undefined;
    if (!cli) {
      timeline.line(
        'approvals',
        'the embedded database serves one process (this one), so the decisions go in process with client.signal; ' +
          'the same `palisade runs signal` command sends each on PostgreSQL (DATABASE_URL):',
      );
    }
    await Promise.all(
      pending
        .filter((p) => p.emailId !== demo.timedOutEmail)
        .map(async (p) => {
          const approved = p.emailId !== demo.rejectedEmail;
          const decision: RefundApproval = approved
            ? { approved: true, approver: demo.approver }
            : {
                approved: false,
                approver: demo.approver,
                note: 'the photos show wear from use, not a defect',
              };
          const runId = runOf.get(p.emailId)?.runId ?? '';
          const sent = await sendDecision({
            engine: resources.main,
            runId,
            decision,
            ...(cli ? { cli } : {}),
          });
          decisions.push({ ...sent, emailId: p.emailId, approved });
          progress.moved();
          decided.set(p.emailId, approved ? 'approved' : 'rejected');
          timeline.line('approvals', `${approved ? 'approve' : 'REJECT '} ${p.emailId}: ${sent.command}`);
          if (sent.output) timeline.line('palisade', sent.output);
        }),
    );
    timeline.line('approvals', `${demo.timedOutEmail}: nobody answers`);

    // Everything but the unanswered approval finishes; then two days pass, by the database clock.
    await waitUntil(() => settled.size >= data.emails.length - 1, progress);
    const timedOutHandle = runOf.get(demo.timedOutEmail);
    let advancedMs = 0;
    if (timedOutHandle && !settled.has(demo.timedOutEmail)) {
      const wait = await snapshotWait(timedOutHandle, demo.timedOutEmail);
      timeline.line('approvals', `${demo.timedOutEmail} still waits (${wait.detail})`);
      advancedMs = demo.approvalTimeoutMs + 60_000;
      clockMoved = true;
      await advanceClock(resources.main, advancedMs);
      timeline.line(
        'TIME TRAVEL',
        `the database clock moves forward 2 days and 1 minute: the approval's timeout is due`,
      );
      decided.set(demo.timedOutEmail, 'timed-out');
    }
    await Promise.all(finished);
    const runMs = timeline.elapsedMs() - runStartedMs;
    const watch = await watched;
    if (zombie) await Promise.race([zombie.settled, delay(15_000)]);

    // Read everything back.
    const byRun = <T>(run: RunHandle<T> | undefined): Promise<RunDetails | undefined> =>
      run ? run.describe() : Promise.resolve(undefined);
    const killRecord = kill.record;
    const [killDescription, zombieDescription, timeoutDescription] = await Promise.all([
      byRun(runOf.get(demo.killed.emailId)),
      byRun(runOf.get(demo.zombieEmail)),
      byRun(timedOutHandle),
    ]);
    const db = app.db;
    const runIds = [...runOf.values()].map((h) => h.runId);
    const [outbox, escalations, approvals, ledger, orders, killSteps] = await Promise.all([
      db.select({ emailId: tables.outbox.emailId, runId: tables.outbox.runId }).from(tables.outbox),
      db
        .select({
          emailId: tables.escalations.emailId,
          runId: tables.escalations.runId,
          reason: tables.escalations.reason,
        })
        .from(tables.escalations),
      db.select().from(tables.approvals).where(inArray(tables.approvals.runId, runIds)),
      db.select().from(tables.refundLedger).orderBy(tables.refundLedger.id),
      db
        .select({ orderId: tables.orders.orderId, refundedCents: tables.orders.refundedCents })
        .from(tables.orders),
      db
        .select({
          scope: tables.agentSteps.scope,
          tool: tables.agentSteps.tool,
          executions: tables.agentSteps.executions,
        })
        .from(tables.agentSteps)
        .where(eq(tables.agentSteps.runId, killRecord?.runId ?? '')),
    ]);
    const refunds = (await shop.refunds()).filter((r) =>
      emailByRun.has(r.idempotencyKey.split('/')[1] ?? ''),
    );
    const checks = verifySupportAgent({
      emails: data.emails,
      runs: new Map(
        data.emails.map((e) => [e.id, { runId: runOf.get(e.id)?.runId ?? '', outcome: outcomes.get(e.id) }]),
      ),
      outbox,
      escalations,
      approvals,
      ledger,
      refunds,
      orders,
      approvalThresholdCents: demo.approvalThresholdCents,
      decisions: decided,
      kill: { record: killRecord, description: killDescription, steps: killSteps },
      zombie: { record: zombie?.record, description: zombieDescription },
      waits,
      timeout: { emailId: demo.timedOutEmail, description: timeoutDescription, advancedMs },
      watch,
    });
    const ok = checks.every((c) => c.ok);
    const escalatedCount = [...outcomes.values()].filter((o) => o.outcome === 'escalated').length;
    log('');
    log(`checks (${database}):`);
    for (const c of checks) log(`  ${c.ok ? '✓' : '✗'} ${c.name} — ${c.detail}`);
    const totalMs = timeline.elapsedMs();
    log(
      `  ${ok ? 'all checks passed' : 'SOME CHECKS FAILED'} in ${(totalMs / 1000).toFixed(1)} s ` +
        `(setup ${(setupMs / 1000).toFixed(1)} s, run ${(runMs / 1000).toFixed(1)} s)`,
    );
    return {
      ok,
      database,
      schema,
      runId: runOf.get(demo.killed.emailId)?.runId,
      zombieRunId: runOf.get(demo.zombieEmail)?.runId,
      timedOutRunId: timedOutHandle?.runId,
      checks,
      outcomes,
      decisions,
      counts: {
        emails: data.emails.length,
        answered: outcomes.size - escalatedCount,
        escalated: escalatedCount,
        refunds: refunds.length,
        approvalsRequested: approvals.length,
      },
      timingsMs: { setup: setupMs, run: runMs, total: totalMs },
    };
  } finally {
    zombie?.dispose();
    if (clockMoved) await resetClock(resources.main).catch(() => undefined);
    await closeDemoResources(
      resources,
      provider,
      options.keepSchema ? [] : [schema, appSchema, providerSchema],
    );
  }
}

/** The refund activity's events in the shape the invoice example's StallFault reads (the email in the invoice's place). */
function asInvoiceEvent(event: SupportAgentEvent): InvoiceActivityEvent | undefined {
  const { by, emailId: invoiceNumber } = event;
  switch (event.type) {
    case 'refund:started':
      return { type: 'charge:started', by, invoiceNumber };
    case 'refund:recorded':
      return {
        type: 'ledger:written',
        by,
        invoiceNumber,
        ledgerEntryId: event.ledgerEntryId,
        alreadyRecorded: event.alreadyRecorded,
      };
    case 'refund:refused':
      return { type: 'ledger:refused', by, invoiceNumber, error: event.error };
    default:
      return undefined;
  }
}

/** Insert the orders, each paid by a charge at the provider (refunds are made against it). */
async function seedOrders(
  app: AppDatabase,
  tables: SupportTables,
  providerUrl: string,
  inboxId: string,
  orders: readonly Order[],
): Promise<void> {
  const rows = [];
  for (let i = 0; i < orders.length; i += 16) {
    const batch = orders.slice(i, i + 16);
    rows.push(
      ...(await Promise.all(
        batch.map(async (o) => {
          const charge = await createCharge(providerUrl, {
            idempotencyKey: `support-agent/${inboxId}/order/${o.orderId}`,
            amountMinor: o.totalCents,
            currency: o.currency,
            customer: o.customerEmail,
            description: `${o.orderId} (${o.item})`,
          });
          return { ...o, chargeId: charge.id };
        }),
      )),
    );
  }
  await app.db.insert(tables.orders).values(rows);
}

/**
 * Stream one run's events with `handle.watch()`, printing its progress (what `ctx.setProgress` recorded) and its
 * reclaimed attempts as they happen; resolves with every event seen, once the run ended.
 */
async function streamProgress(
  handle: RunHandle | undefined,
  emailId: string,
  timeline: Timeline,
): Promise<{ emailId: string; events: SeenEvent[] }> {
  const events: SeenEvent[] = [];
  if (!handle) return { emailId, events };
  try {
    for await (const event of handle.watch({ pollIntervalMs: 250 })) {
      events.push({ type: event.type, data: event.data });
      if (event.type === 'run:progress') {
        const v = (event.data as { value?: { step?: number; phase?: string; tool?: string } } | null)?.value;
        timeline.line(
          'watch',
          `${emailId} step ${v?.step ?? '?'}: ${v?.phase ?? '?'}${v?.tool ? ` ${v.tool}` : ''}`,
        );
      } else if (event.type === 'attempt:claimed' && (event.epoch ?? 1) > 1) {
        timeline.line(
          'watch',
          `${emailId} ${event.stepName ?? 'step'} claimed again by ${event.workerId} · epoch ${event.epoch} · token ${event.token}`,
        );
      } else if (event.type === 'run:completed') {
        timeline.line('watch', `${emailId} run completed`);
      }
    }
  } catch (error) {
    timeline.line('watch', `watch of ${emailId} ended: ${describeError(error)}`);
  }
  return { emailId, events };
}

/** The pending approvals, once every run has ended or waits for one (polled: a person's queue is a table). */
async function waitForApprovalQueue(
  app: AppDatabase,
  tables: SupportTables,
  settled: ReadonlySet<string>,
  total: number,
  progress: ProgressClock,
): Promise<{ emailId: string; amountCents: number }[]> {
  const read = () =>
    app.db
      .select({ emailId: tables.approvals.emailId, amountCents: tables.approvals.amountCents })
      .from(tables.approvals)
      .where(eq(tables.approvals.status, 'pending'))
      .orderBy(tables.approvals.emailId);
  let pending = await read();
  await waitUntil(async () => {
    pending = await read();
    return settled.size + pending.length >= total;
  }, progress);
  return pending;
}

/** Whether a run waiting for its approval holds any lease: its wait unclaimed, no step running, no turn open. */
async function snapshotWait(handle: RunHandle | undefined, emailId: string): Promise<WaitSnapshot> {
  if (!handle) return { emailId, runId: '', noLeaseHeld: false, detail: 'no run' };
  // The wait is recorded by the turn after the approval request: give that turn a moment to commit.
  let d = await handle.describe();
  const wait = () => d.steps.find((s) => s.kind === 'signal' && s.status === 'scheduled');
  await waitUntil(async () => {
    d = await handle.describe();
    return wait() !== undefined && d.turns.every((t) => t.endedAt !== null);
  }, 10_000);
  const w = wait();
  const running = d.steps.filter((s) => s.status === 'running');
  const openTurns = d.turns.filter((t) => t.endedAt === null);
  const noLeaseHeld =
    w !== undefined &&
    w.token === null &&
    w.leaseExpiresAt === null &&
    running.length === 0 &&
    openTurns.length === 0;
  return {
    emailId,
    runId: handle.runId,
    noLeaseHeld,
    detail: w
      ? `signal step #${w.seq} ${w.name}: token ${w.token ?? 'none'}, lease ${w.leaseExpiresAt?.toISOString() ?? 'none'}, due ` +
        `${w.nextRunAt?.toISOString() ?? '?'}; ${running.length} step(s) running, ${openTurns.length} turn(s) open`
      : 'no signal wait recorded',
  };
}

/** When the demo counts as stalled: `quietMs` after the last progress (an email settled, a decision sent). */
class ProgressClock {
  private lastMs = performance.now();
  constructor(private readonly quietMs: number) {}
  moved(): void {
    this.lastMs = performance.now();
  }
  /** ms until the demo counts as stalled (≤ 0: it does). */
  leftMs(): number {
    return this.lastMs + this.quietMs - performance.now();
  }
}

/**
 * The run's result, waiting while the demo makes progress: a `RESULT_TIMEOUT` only ends the wait once nothing
 * moved for the clock's `quietMs` (a run waiting for its approval ends only after every other run has). Other
 * errors (the run failed or was cancelled) are thrown.
 */
async function resultUnlessStalled<T>(
  handle: RunHandle<T> | undefined,
  progress: ProgressClock,
): Promise<T | undefined> {
  if (!handle) return undefined;
  for (;;) {
    try {
      return await handle.result({ timeoutMs: Math.max(1_000, progress.leftMs()), pollIntervalMs: 1_000 });
    } catch (error) {
      if (!(error instanceof PalisadeError && error.code === 'RESULT_TIMEOUT') || progress.leftMs() <= 0)
        throw error;
    }
  }
}

async function waitUntil(
  condition: () => boolean | Promise<boolean>,
  limit: number | ProgressClock,
): Promise<void> {
  const deadline = typeof limit === 'number' ? performance.now() + limit : undefined;
  while (!(await condition())) {
    if ((deadline ?? Infinity) < performance.now() || (typeof limit !== 'number' && limit.leftMs() <= 0))
      return;
    await delay(100);
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
