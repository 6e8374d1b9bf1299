// The official openai npm client (6.x) against a running `kestrel serve` at KESTREL_URL: non-streaming and
// streaming completions and chat completions, usage in streams, model listing, error handling and structured
// output (response_format json_schema / json_object), tool-call round trips and embeddings.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = (process.env.KESTREL_URL ?? 'http://127.0.0.1:8080') + '/v1';
const client = new OpenAI({ baseURL, apiKey: process.env.KESTREL_API_KEY ?? 'none', maxRetries: 0, timeout: 60_000 });

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    console.error(`FAIL ${name}: ${e.stack ?? e}`);
    process.exitCode = 1;
  }
}

await check('models.list', async () => {
  const models = await client.models.list();
  assert.ok(models.data.length >= 1);
  assert.equal(models.data[0].object, 'model');
});

let completionText = '';
await check('completions.create', async () => {
  const r = await client.completions.create({ model: 'kestrel', prompt: 'Once upon a time', max_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  completionText = r.choices[0].text;
  assert.ok(completionText.startsWith(', there was a little girl named Lily'), completionText);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 16);
});

await check('completions.create stream', async () => {
  const stream = await client.completions.create({
    model: 'kestrel', prompt: 'Once upon a time', max_tokens: 16, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, completionText);
  assert.equal(finish, 'length');
  assert.equal(usage?.completion_tokens, 16);
});

await check('chat.completions.create', async () => {
  const r = await client.chat.completions.create({
    model: 'kestrel',
    messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me a story.' }],
    max_tokens: 12, seed: 7, logprobs: true, top_logprobs: 2,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].logprobs.content.length, r.usage.completion_tokens);
  assert.ok(r.usage.prompt_tokens > 0);
});

await check('chat.completions.create stream', async () => {
  const stream = await client.chat.completions.create({
    model: 'kestrel', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 10, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let content = '';
  let role = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      content += c.delta.content ?? '';
    }
  }
  assert.equal(role, 'assistant');
  assert.ok(content.length > 0);
  assert.equal(usage?.completion_tokens, 10);
  // The same request without streaming gives the same greedy text.
  const whole = await client.chat.completions.create({
    model: 'kestrel', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 10, temperature: 0,
  });
  assert.equal(whole.choices[0].message.content, content);
});

await check('bad request raises BadRequestError', async () => {
  await assert.rejects(
    client.completions.create({ model: 'kestrel', prompt: 'x', temperature: 9 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /temperature/.test(e.message),
  );
});

await check('chat.completions.create json_schema (structured output)', async () => {
  const schema = {
    type: 'object',
    properties: {
      title: { type: 'string', maxLength: 20 },
      rating: { type: 'integer', minimum: 0 },
      mood: { enum: ['happy', 'sad', 'brave'] },
      tags: { type: 'array', items: { type: 'string', maxLength: 8 }, maxItems: 3 },
    },
    required: ['title', 'rating', 'mood', 'tags'],
    additionalProperties: false,
  };
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model: 'kestrel', messages: [{ role: 'user', content: 'Rate a story as JSON.' }], max_tokens: 300, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'review', schema, strict: true } },
    });
    assert.equal(r.choices[0].finish_reason, 'stop', r.choices[0].message.content);
    const review = JSON.parse(r.choices[0].message.content);
    assert.deepEqual(Object.keys(review).sort(), ['mood', 'rating', 'tags', 'title']);
    assert.ok(typeof review.title === 'string' && [...review.title].length <= 20);
    assert.ok(Number.isInteger(review.rating) && review.rating >= 0);
    assert.ok(['happy', 'sad', 'brave'].includes(review.mood));
    assert.ok(Array.isArray(review.tags) && review.tags.length <= 3 && review.tags.every((t) => typeof t === 'string'));
  }
  const json = await client.chat.completions.create({
    model: 'kestrel', messages: [{ role: 'user', content: 'JSON please.' }], max_tokens: 400, temperature: 1, seed: 4,
    response_format: { type: 'json_object' },
  });
  const text = json.choices[0].message.content;
  assert.equal(text.trimStart()[0], '{');
  if (json.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(text), 'object');
});

// Tool calling round trips on three template families (Hermes/Qwen, Llama 3.1, Mistral): a forced call,
// the tool's result in the history, then the model's text answer.
const toolUrls = (process.env.KESTREL_TOOL_URLS ?? `qwen=${process.env.KESTREL_URL ?? 'http://127.0.0.1:8080'}`)
  .split(',').map((pair) => pair.split('='));
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['C', 'F'] } }, required: ['city'] },
  },
}];
for (const [family, url] of toolUrls) {
  await check(`tool call round trip (${family})`, async () => {
    const c = new OpenAI({ baseURL: url + '/v1', apiKey: 'none', maxRetries: 0, timeout: 60_000 });
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const first = await c.chat.completions.create({ model: 'kestrel', messages, tools, tool_choice: 'required', max_tokens: 100, temperature: 1, seed: 5 });
    assert.equal(first.choices[0].finish_reason, 'tool_calls', JSON.stringify(first));
    const call = first.choices[0].message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'get_weather');
    assert.match(call.id, /^[A-Za-z0-9]{9}$/);
    const args = JSON.parse(call.function.arguments);
    assert.equal(typeof args.city, 'string');
    messages.push(first.choices[0].message);
    messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify({ celsius: 21 }) });
    const answer = await c.chat.completions.create({ model: 'kestrel', messages, tools, tool_choice: 'none', max_tokens: 10, seed: 5 });
    assert.equal(typeof answer.choices[0].message.content, 'string');
    assert.ok(!answer.choices[0].message.tool_calls?.length);
    // Streamed: the call arrives as deltas the client assembles.
    const stream = await c.chat.completions.create({ model: 'kestrel', messages: messages.slice(0, 1), tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 100, temperature: 1, seed: 6, stream: true });
    let name = '', argText = '', finish = null;
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        for (const tc of ch.delta.tool_calls ?? []) { name += tc.function?.name ?? ''; argText += tc.function?.arguments ?? ''; }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(name, 'get_weather');
    assert.equal(typeof JSON.parse(argText).city, 'string');
  });
}

// Embeddings: the client asks for base64 by default and decodes it; floats on request. A text's vector is
// the same alone and in a batch of 16, unit length.
await check('embeddings.create (alone and in a batch of 16, base64 and float)', async () => {
  const texts = Array.from({ length: 16 }, (_, i) => `${i % 2 ? 'The cat sat on the mat' : 'Once upon a time'} ${'!'.repeat(i)} ${i}`);
  const batch = await client.embeddings.create({ model: 'kestrel', input: texts });
  assert.equal(batch.object, 'list');
  assert.equal(batch.data.length, 16);
  assert.ok(batch.usage.prompt_tokens > 16);
  const width = batch.data[0].embedding.length;
  assert.ok(width > 0);
  for (const [i, text] of texts.entries()) {
    assert.equal(batch.data[i].index, i);
    // (Without encoding_format the client asks for base64 and decodes it.)
    const alone = await client.embeddings.create({ model: 'kestrel', input: text, ...(i % 2 ? { encoding_format: 'float' } : {}) });
    assert.deepEqual(alone.data[0].embedding, batch.data[i].embedding, `input ${i}`);
    const norm = Math.hypot(...alone.data[0].embedding);
    assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
  }
  assert.notDeepEqual(batch.data[0].embedding, batch.data[1].embedding);
  await assert.rejects(client.embeddings.create({ model: 'kestrel', input: '' }), (e) => e.status === 400);
});
