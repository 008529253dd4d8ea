/**
 * The agent's model, as an interface with two providers: an OpenAI-compatible chat-completions client with tool
 * calling (openai-model.ts) and an offline one built on wink-nlp (offline-model.ts). Both take the conversation so
 * far — in the chat-completions message format, which the workflow keeps in its history — and the tools, and
 * return either tool calls or the final answer (the reply to the customer).
 * @module
 */
import { z } from 'zod';

/** A tool call as the assistant message carries it (`arguments` is a JSON text, as the protocol has it). */
export const toolCallSchema = z.object({
  id: z.string().min(1),
  type: z.literal('function'),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});
export type ToolCall = z.infer<typeof toolCallSchema>;

/** One message of the conversation, in the chat-completions format. */
export const chatMessageSchema = z.discriminatedUnion('role', [
  z.object({ role: z.literal('system'), content: z.string() }),
  z.object({ role: z.literal('user'), content: z.string() }),
  z.object({
    role: z.literal('assistant'),
    content: z.string().nullable(),
    tool_calls: z.array(toolCallSchema).optional(),
  }),
  z.object({ role: z.literal('tool'), tool_call_id: z.string(), content: z.string() }),
]);
export type ChatMessage = z.infer<typeof chatMessageSchema>;

/** What the model decided: call these tools (in order), or answer the customer with `content`. */
export const modelDecisionSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('tool_calls'), calls: z.array(toolCallSchema).min(1) }),
  z.object({ type: z.literal('answer'), content: z.string().min(1) }),
]);
export type ModelDecision = z.infer<typeof modelDecisionSchema>;

/** A tool as the model is told about it: a name, what it does, and a JSON Schema of its arguments. */
export interface ToolSpec {
  readonly type: 'function';
  readonly function: {
    readonly name: string;
    readonly description: string;
    readonly parameters: Record<string, unknown>;
  };
}

/** What one call of the model gets. */
export interface ModelRequest {
  readonly messages: readonly ChatMessage[];
  readonly tools: readonly ToolSpec[];
  /** Abort the call (the activity's signal: its lease is gone, or the worker stops). */
  readonly signal?: AbortSignal;
}

/** The agent's model: given the conversation so far and the tools, the next decision. */
export interface AgentModel {
  /** For logs and the demo's setup line, e.g. `offline (wink-nlp)` or `gpt-4o-mini at http://…`. */
  readonly description: string;
  /**
   * Decide the next step.
   * @throws ApplicationFailure: retryable when the model could not be reached or answered with an error that may
   * pass, non-retryable when its answer cannot be used.
   */
  next(request: ModelRequest): Promise<ModelDecision>;
}
