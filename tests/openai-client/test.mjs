// The official openai npm client (6.x) against a running `kestrel serve` at KESTREL_URL: non-streaming and
// streaming completions and chat completions, usage in streams, model listing, error handling and structured
// output (response_format json_schema / json_object).
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
