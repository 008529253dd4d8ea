/**
 * The agent's model over an OpenAI-compatible chat-completions API with tool calling (OpenAI, or any server that
 * speaks the protocol: vLLM, llama.cpp's server, Ollama, LM Studio…): plain `fetch` to `<baseUrl>/chat/completions`.
 * @module
 */
import { z } from 'zod';
import { ApplicationFailure } from '@palisade/sdk';
import { toolCallSchema, type AgentModel, type ModelDecision, type ModelRequest } from './agent-model.js';

/** Options of {@link createOpenAiModel}. */
export interface OpenAiModelOptions {
  /** The API's base URL, up to and including the version, e.g. `https://api.openai.com/v1`. */
  readonly baseUrl: string;
  /** Sent as `Authorization: Bearer <apiKey>` when set. */
  readonly apiKey?: string;
  /** @defaultValue `gpt-4o-mini` */
  readonly model?: string;
  /** Give up on one call after this long (ms). @defaultValue 60_000 */
  readonly timeoutMs?: number;
}

/** The part of a chat-completions response the agent reads. */
const completionSchema = z.object({
  choices: z
    .array(
      z.object({
        message: z.object({
          content: z.string().nullable().optional(),
          tool_calls: z.array(toolCallSchema).nullable().optional(),
        }),
        finish_reason: z.string().nullable().optional(),
      }),
    )
    .min(1),
});

/**
 * The model settings from the environment: `PALISADE_LLM_BASE_URL` (when unset: undefined, use the offline model),
 * `PALISADE_LLM_API_KEY`, `PALISADE_LLM_MODEL`.
 */
export function openAiOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): OpenAiModelOptions | undefined {
  const baseUrl = env.PALISADE_LLM_BASE_URL?.trim();
  if (!baseUrl) return undefined;
  return {
    baseUrl,
    ...(env.PALISADE_LLM_API_KEY ? { apiKey: env.PALISADE_LLM_API_KEY } : {}),
    ...(env.PALISADE_LLM_MODEL ? { model: env.PALISADE_LLM_MODEL } : {}),
  };
}

/**
 * A model that asks a chat-completions API: the conversation as `messages`, the tools as `tools` with
 * `tool_choice: 'auto'`, temperature 0. An answer with `tool_calls` is a decision to call them; one with only
 * `content` is the reply.
 * @throws (from `next`) ApplicationFailure — retryable for a network error, a timeout, 408, 409, 429 or a 5xx;
 * non-retryable for another 4xx or an answer that is neither tool calls nor content.
 */
export function createOpenAiModel(options: OpenAiModelOptions): AgentModel {
  const model = options.model ?? 'gpt-4o-mini';
  const url = `${options.baseUrl.replace(/\/+$/, '')}/chat/completions`;
  const timeoutMs = options.timeoutMs ?? 60_000;
  return {
    description: `${model} at ${options.baseUrl} (OpenAI-compatible chat completions)`,
    async next(request: ModelRequest): Promise<ModelDecision> {
      const signals = [AbortSignal.timeout(timeoutMs), ...(request.signal ? [request.signal] : [])];
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            ...(options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {}),
          },
          body: JSON.stringify({
            model,
            messages: request.messages,
            tools: request.tools,
            tool_choice: 'auto',
            temperature: 0,
          }),
          signal: AbortSignal.any(signals),
        });
      } catch (error) {
        throw ApplicationFailure.retryable(
          `model API ${url} unreachable: ${error instanceof Error ? error.message : String(error)}`,
          'ModelUnavailable',
        );
      }
      const text = await response.text();
      if (!response.ok) {
        const message = `model API answered ${response.status}: ${text.slice(0, 500)}`;
        const transient = response.status >= 500 || [408, 409, 429].includes(response.status);
        throw transient
          ? ApplicationFailure.retryable(message, 'ModelError')
          : ApplicationFailure.nonRetryable(message, 'ModelRefused');
      }
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        throw ApplicationFailure.nonRetryable(
          `model API answered with no JSON: ${text.slice(0, 200)}`,
          'ModelAnswer',
        );
      }
      const parsed = completionSchema.safeParse(json);
      if (!parsed.success) {
        throw ApplicationFailure.nonRetryable(
          `model API answer is not a chat completion: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
          'ModelAnswer',
        );
      }
      const message = parsed.data.choices[0]?.message;
      const calls = message?.tool_calls ?? [];
      if (calls.length > 0) return { type: 'tool_calls', calls };
      const content = message?.content?.trim();
      if (content) return { type: 'answer', content };
      throw ApplicationFailure.nonRetryable(
        'model API answered with neither tool calls nor content',
        'ModelAnswer',
      );
    },
  };
}
