import { createServer, type IncomingMessage, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { ApplicationFailure } from '@palisade/sdk';
import type { ChatMessage } from './agent-model.js';
import { TOOL_SPECS } from './agent-tools.js';
import { createOpenAiModel, openAiOptionsFromEnv } from './openai-model.js';

interface Received {
  readonly path: string;
  readonly authorization: string | undefined;
  readonly body: {
    model: string;
    messages: ChatMessage[];
    tools: unknown[];
    tool_choice: string;
  };
}

let server: Server | undefined;
afterEach(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

/** A chat-completions server on loopback that answers from `answers` in turn and keeps what it received. */
async function startServer(answers: readonly { status: number; body: unknown }[]) {
  const received: Received[] = [];
  server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({
        path: req.url ?? '',
        authorization: req.headers.authorization,
        body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as Received['body'],
      });
      const answer = answers[received.length - 1] ?? { status: 500, body: { error: 'no more answers' } };
      res.writeHead(answer.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(answer.body));
    });
  });
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', () => resolve()));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  return { baseUrl: `http://127.0.0.1:${address.port}/v1`, received };
}

const lookupCall = {
  id: 'call_abc',
  type: 'function' as const,
  function: { name: 'lookup_order', arguments: '{"order_id":"ORD-12345"}' },
};

describe('the OpenAI-compatible model', () => {
  it('sends the conversation and the tools, and returns tool calls, then the answer', async () => {
    const { baseUrl, received } = await startServer([
      {
        status: 200,
        body: {
          id: 'chatcmpl-1',
          object: 'chat.completion',
          choices: [
            {
              index: 0,
              finish_reason: 'tool_calls',
              message: { role: 'assistant', content: null, tool_calls: [lookupCall] },
            },
          ],
        },
      },
      {
        status: 200,
        body: {
          id: 'chatcmpl-2',
          object: 'chat.completion',
          choices: [
            {
              index: 0,
              finish_reason: 'stop',
              message: { role: 'assistant', content: 'Your order shipped.' },
            },
          ],
        },
      },
    ]);
    const model = createOpenAiModel({ baseUrl: `${baseUrl}/`, apiKey: 'sk-test', model: 'test-model' });
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are the support agent.' },
      { role: 'user', content: 'Where is ORD-12345?' },
    ];

    const first = await model.next({ messages, tools: TOOL_SPECS });
    expect(first).toEqual({ type: 'tool_calls', calls: [lookupCall] });
    messages.push({ role: 'assistant', content: null, tool_calls: [lookupCall] });
    messages.push({ role: 'tool', tool_call_id: 'call_abc', content: '{"found":true,"status":"shipped"}' });
    const second = await model.next({ messages, tools: TOOL_SPECS });
    expect(second).toEqual({ type: 'answer', content: 'Your order shipped.' });

    expect(received.map((r) => r.path)).toEqual(['/v1/chat/completions', '/v1/chat/completions']);
    expect(received.every((r) => r.authorization === 'Bearer sk-test')).toBe(true);
    const [one, two] = received;
    expect(one?.body.model).toBe('test-model');
    expect(one?.body.tool_choice).toBe('auto');
    expect(one?.body.tools).toEqual(TOOL_SPECS);
    expect(one?.body.messages).toEqual(messages.slice(0, 2));
    // The second request carries the tool call and its result, as the protocol wants them.
    expect(two?.body.messages.slice(2)).toEqual([
      { role: 'assistant', content: null, tool_calls: [lookupCall] },
      { role: 'tool', tool_call_id: 'call_abc', content: '{"found":true,"status":"shipped"}' },
    ]);
  });

  it('fails retryably on a 5xx or 429 and for good on another 4xx or an unusable answer', async () => {
    const { baseUrl } = await startServer([
      { status: 503, body: { error: 'overloaded' } },
      { status: 429, body: { error: 'slow down' } },
      { status: 400, body: { error: { message: 'bad tools' } } },
      { status: 200, body: { choices: [{ message: { content: '' } }] } },
      { status: 200, body: { nothing: true } },
    ]);
    const model = createOpenAiModel({ baseUrl });
    const request = { messages: [{ role: 'user' as const, content: 'hi' }], tools: TOOL_SPECS };
    const failure = async () => {
      const error = await model.next(request).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ApplicationFailure);
      return error as ApplicationFailure;
    };
    expect((await failure()).nonRetryable).toBe(false);
    expect((await failure()).nonRetryable).toBe(false);
    expect(await failure()).toMatchObject({ nonRetryable: true, type: 'ModelRefused' });
    expect(await failure()).toMatchObject({ nonRetryable: true, type: 'ModelAnswer' });
    expect(await failure()).toMatchObject({ nonRetryable: true, type: 'ModelAnswer' });
  });

  it('is chosen by PALISADE_LLM_BASE_URL, with its key and model', () => {
    expect(openAiOptionsFromEnv({})).toBeUndefined();
    expect(
      openAiOptionsFromEnv({
        PALISADE_LLM_BASE_URL: 'http://127.0.0.1:8080/v1',
        PALISADE_LLM_API_KEY: 'k',
        PALISADE_LLM_MODEL: 'm',
      }),
    ).toEqual({ baseUrl: 'http://127.0.0.1:8080/v1', apiKey: 'k', model: 'm' });
  });
});
