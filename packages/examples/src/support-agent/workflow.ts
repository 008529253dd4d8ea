import { z } from 'zod';
import {
  CancelledFailure,
  defineSignal,
  defineWorkflow,
  type Duration,
  type WorkflowContext,
} from '@palisade/sdk';
import type { ChatMessage, ToolCall } from './agent-model.js';
import { TOOL_ARGUMENTS, isToolName, systemPrompt, type RefundToolResult } from './agent-tools.js';
import type { EmailContext, SupportAgentActivities } from './activities.js';
import { customerEmailSchema, type CustomerEmail } from './inbox.js';

/**
 * A person's decision on a refund above the approval threshold, sent to the email's run: by the demo with
 * `palisade runs signal <run> support-agent.refund-approval '{"approved":true,"approver":"dana"}'`, or from code
 * with `handle.signal(refundApprovalSignal, { approved: true, approver: 'dana' })`.
 */
export const refundApprovalSignal = defineSignal({
  name: 'support-agent.refund-approval',
  payload: z.object({
    approved: z.boolean(),
    approver: z.string().min(1).max(100),
    note: z.string().max(500).optional(),
  }),
});
export type RefundApproval = z.infer<typeof refundApprovalSignal.payload>;

/** The input of one run: the email, and how many model calls it may take. */
export const supportAgentInput = z.object({
  email: customerEmailSchema,
  /** Model calls before the agent gives up and escalates. @defaultValue 8 */
  maxModelTurns: z.number().int().min(1).max(30).default(8),
});

const toolCallRecord = z.object({
  tool: z.string(),
  ok: z.boolean(),
});

/** What one run returns: how the email ended, the tools it used, its refund and approval. */
export const emailOutcome = z.object({
  emailId: z.string(),
  /** `escalated` when a person must follow up (the customer got a holding reply); `answered` otherwise. */
  outcome: z.enum(['answered', 'escalated']),
  modelTurns: z.number().int(),
  toolCalls: z.array(toolCallRecord),
  refund: z.object({ status: z.string(), amountCents: z.number().int().nullable() }).nullable(),
  approval: z.enum(['approved', 'rejected', 'timed-out']).nullable(),
  outboxId: z.number().int(),
});
export type EmailOutcome = z.infer<typeof emailOutcome>;

/** What the run shows as its progress (`ctx.setProgress`), for `handle.watch()` and `palisade runs show`. */
export interface AgentProgress {
  readonly emailId: string;
  readonly step: number;
  readonly phase: 'thinking' | 'tool' | 'awaiting-approval' | 'replying' | 'done';
  readonly tool?: string;
  readonly toolCalls: number;
}

/** Options of {@link createSupportAgentWorkflow}. */
export interface SupportAgentWorkflowOptions {
  /** Refunds above this many cents wait for a person's approval. */
  readonly approvalThresholdCents: number;
  /** How long a refund waits for that approval before the email is escalated. @defaultValue `'2d'` */
  readonly approvalTimeoutMs?: Duration;
}

/** `2 days`, `36 hours`, `90 minutes`, or a duration string as given. */
function describeDuration(duration: Duration): string {
  if (typeof duration === 'string') return duration;
  for (const [unitMs, unit] of [
    [86_400_000, 'day'],
    [3_600_000, 'hour'],
    [60_000, 'minute'],
  ] as const) {
    if (duration % unitMs === 0) return `${duration / unitMs} ${unit}${duration === unitMs ? '' : 's'}`;
  }
  return `${duration} ms`;
}

/** The email as the model reads it: who wrote, when, the subject and the body. */
export function formatEmail(email: CustomerEmail): string {
  return `From: ${email.name} <${email.from}>\nReceived: ${email.receivedAt}\nSubject: ${email.subject}\n\n${email.body}`;
}

/**
 * The support agent: one run per email. It loops — the model (an activity) picks the next tool, the tool runs as an
 * activity, its result goes back into the conversation — until the model answers; the answer is written to the
 * outbox. Everything the loop does is a recorded step, so a run that moves to another worker (its worker killed)
 * replays the conversation from history without asking the model or calling a tool again. A refund above the
 * threshold waits for a person's approval by signal (holding no lease), for at most `approvalTimeoutMs`: a rejection
 * is told to the model; a timeout escalates the email.
 */
export function createSupportAgentWorkflow(
  activities: SupportAgentActivities,
  options: SupportAgentWorkflowOptions,
) {
  const approvalTimeoutMs = options.approvalTimeoutMs ?? '2d';
  return defineWorkflow({
    name: 'support-agent.handle-email',
    input: supportAgentInput,
    output: emailOutcome,
    async run({ email, maxModelTurns }, ctx) {
      const context: EmailContext = {
        emailId: email.id,
        customerEmail: email.from,
        receivedAt: email.receivedAt,
      };
      const messages: ChatMessage[] = [
        { role: 'system', content: systemPrompt(options.approvalThresholdCents) },
        { role: 'user', content: formatEmail(email) },
      ];
      const toolCalls: z.infer<typeof toolCallRecord>[] = [];
      const state: {
        escalated: boolean;
        refund: EmailOutcome['refund'];
        approval: EmailOutcome['approval'];
      } = { escalated: false, refund: null, approval: null };
      const progress = (step: number, phase: AgentProgress['phase'], tool?: string): void =>
        ctx.setProgress({
          emailId: email.id,
          step,
          phase,
          ...(tool ? { tool } : {}),
          toolCalls: toolCalls.length,
        } satisfies AgentProgress);

      /** Run one tool call as its activity; what it returns (or why it could not run) goes back to the model. */
      const runTool = async (call: ToolCall, step: number): Promise<unknown> => {
        const name = call.function.name;
        if (!isToolName(name)) return { error: `there is no tool ${name}` };
        let raw: unknown;
        try {
          raw = JSON.parse(call.function.arguments);
        } catch {
          return { error: `the arguments of ${name} are not JSON` };
        }
        const parsed = TOOL_ARGUMENTS[name].safeParse(raw);
        if (!parsed.success) {
          return { error: parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') };
        }
        progress(step, 'tool', name);
        switch (name) {
          case 'lookup_order': {
            const a = TOOL_ARGUMENTS.lookup_order.parse(raw);
            return ctx.run(activities.lookupOrder, { ...context, orderId: a.order_id });
          }
          case 'check_refund_policy': {
            const a = TOOL_ARGUMENTS.check_refund_policy.parse(raw);
            return ctx.run(activities.checkRefundPolicy, {
              ...context,
              orderId: a.order_id,
              ...(a.amount_cents === undefined ? {} : { amountCents: a.amount_cents }),
            });
          }
          case 'cancel_order': {
            const a = TOOL_ARGUMENTS.cancel_order.parse(raw);
            return ctx.run(activities.cancelOrder, { ...context, orderId: a.order_id });
          }
          case 'escalate_to_human': {
            const a = TOOL_ARGUMENTS.escalate_to_human.parse(raw);
            state.escalated = true;
            return ctx.run(activities.escalate, { ...context, reason: a.reason });
          }
          case 'issue_refund': {
            const a = TOOL_ARGUMENTS.issue_refund.parse(raw);
            const result = await refund(ctx, call.id, step, {
              orderId: a.order_id,
              amountCents: a.amount_cents,
              reason: a.reason,
            });
            state.refund = {
              status: result.status,
              amountCents: result.status === 'refunded' ? result.amountCents : null,
            };
            return result;
          }
        }
      };

      /** Refund, after a person's approval when the amount is above the threshold. */
      const refund = async (
        wf: WorkflowContext,
        toolCallId: string,
        step: number,
        r: { orderId: string; amountCents: number; reason: string },
      ): Promise<RefundToolResult> => {
        let approvedBy: string | null = null;
        if (r.amountCents > options.approvalThresholdCents) {
          await wf.run(activities.requestApproval, { ...context, ...r });
          progress(step, 'awaiting-approval', 'issue_refund');
          const wait = await wf.waitForSignal(refundApprovalSignal, { timeoutMs: approvalTimeoutMs });
          if (wait.timedOut) {
            state.approval = 'timed-out';
            await wf.run(activities.recordApproval, {
              ...context,
              decision: 'timed-out',
              decidedBy: null,
              note: null,
            });
            const reason = `no one decided on the refund of ${r.amountCents} cents within ${describeDuration(approvalTimeoutMs)}`;
            state.escalated = true;
            await wf.run(activities.escalate, { ...context, reason });
            return { status: 'escalated', orderId: r.orderId, reason };
          }
          const { approved, approver, note } = wait.payload;
          state.approval = approved ? 'approved' : 'rejected';
          await wf.run(activities.recordApproval, {
            ...context,
            decision: state.approval,
            decidedBy: approver,
            note: note ?? null,
          });
          if (!approved) return { status: 'rejected', orderId: r.orderId, approver, note: note ?? null };
          approvedBy = approver;
        }
        return wf.run(activities.issueRefund, { ...context, ...r, toolCallId, approvedBy });
      };

      let reply: string | undefined;
      let modelFailure: string | undefined;
      let modelTurns = 0;
      while (reply === undefined && modelTurns < maxModelTurns) {
        modelTurns++;
        progress(modelTurns, 'thinking');
        let decision;
        try {
          decision = await ctx.run(activities.decideNext, { emailId: email.id, messages });
        } catch (error) {
          if (error instanceof CancelledFailure) throw error;
          // The model could not be reached for good (its retries are spent): a person takes the email over.
          modelFailure = error instanceof Error ? error.message : String(error);
          break;
        }
        if (decision.type === 'answer') {
          reply = decision.content;
          break;
        }
        messages.push({ role: 'assistant', content: null, tool_calls: decision.calls });
        for (const call of decision.calls) {
          let result: unknown;
          try {
            result = await runTool(call, modelTurns);
          } catch (error) {
            if (error instanceof CancelledFailure) throw error;
            // A tool that failed for good: the model is told, as a person would be.
            result = { error: error instanceof Error ? error.message : String(error) };
          }
          toolCalls.push({
            tool: call.function.name,
            ok: (result as { error?: unknown } | null)?.error === undefined,
          });
          messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify(result) });
        }
      }
      if (reply === undefined) {
        state.escalated = true;
        const { ticket } = await ctx.run(activities.escalate, {
          ...context,
          reason:
            modelFailure === undefined
              ? `the agent reached no answer in ${maxModelTurns} model calls`
              : `the model failed: ${modelFailure.slice(0, 500)}`,
        });
        reply = `Hello,\n\nThank you for your message. A member of our team will follow up on it personally (ticket ${ticket}).\n\nBest regards,\nCustomer Support`;
      }
      progress(modelTurns, 'replying');
      const { outboxId } = await ctx.run(activities.sendReply, {
        ...context,
        subject: `Re: ${email.subject}`,
        body: reply,
      });
      progress(modelTurns, 'done');
      return {
        emailId: email.id,
        outcome: state.escalated ? ('escalated' as const) : ('answered' as const),
        modelTurns,
        toolCalls,
        refund: state.refund,
        approval: state.approval,
        outboxId,
      };
    },
  });
}

/** The workflow {@link createSupportAgentWorkflow} returns. */
export type SupportAgentWorkflow = ReturnType<typeof createSupportAgentWorkflow>;
