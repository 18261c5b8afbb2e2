// OpenAI's own JS client (the `openai` npm package, unmodified) against a real tessera-serve
// serving a decoder preset, and against the GPU baseline process (tessera-gpu --serve, static and
// continuous batching), given nothing but tessera's base URL: completions and chat, streamed and
// not. Greedy answers must equal the reference generation of `tessera-models generate` (the
// models library's greedy_generate in another process, sharing no code with the server's
// scheduler, sampling, detokenizer or HTTP path).
import { before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import OpenAI from "openai";
import { bin, serverForSuite } from "./lib/tessera.mjs";

/// The reference's greedy continuation of a text prompt: {ids, text}.
function reference(model, prompt, maxTokens) {
  const out = execFileSync(
    bin("tessera-models"),
    ["generate", "--model", model, "--prompt", prompt, "--max-tokens", String(maxTokens), "--threads", "1"],
    { encoding: "utf8" },
  );
  const ids = /^generated ids:(.*)$/m.exec(out)[1].trim().split(/\s+/).map(Number);
  const text = /^generated text: (.*)$/m.exec(out)?.[1] ?? "";
  return { ids, text };
}

const servers = [
  { program: "tessera-serve", model: "llama-tiny", args: [] },
  { program: "tessera-serve", model: "gpt2-tiny", args: [] },
  { program: "tessera-gpu", model: "llama-tiny", args: ["--serve", "--llm-batching", "continuous"] },
  { program: "tessera-gpu", model: "llama-tiny", args: ["--serve", "--llm-batching", "static", "--static-batch-size", "2"] },
];
for (const { program, model, args } of servers) {
  describe(`openai client against ${program} --model ${model} ${args.join(" ")}`, () => {
    const server = serverForSuite(["--model", model, "--kv-memory-mb", "32", ...args], program);
    let client;
    before(() => {
      client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    });

    test("models.list names the model", async () => {
      const list = await client.models.list();
      assert.deepEqual(list.data.map((m) => m.id), [model]);
    });

    test("completions.create, greedy, equals the reference", async () => {
      const prompt = "The tile emulator answered";
      const want = reference(model, prompt, 20);
      const got = await client.completions.create({ model, prompt, max_tokens: 20, temperature: 0 });
      assert.equal(got.object, "text_completion");
      assert.equal(got.choices[0].text, want.text);
      assert.equal(got.choices[0].finish_reason, "length");
      assert.equal(got.usage.completion_tokens, 20);
      assert.equal(got.usage.total_tokens, got.usage.prompt_tokens + 20);
    });

    test("completions.create with stream: true gives the same text piece by piece", async () => {
      const prompt = "Café naïve 中文 and more";
      const want = reference(model, prompt, 24);
      const stream = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0, stream: true });
      let text = "";
      let pieces = 0;
      let finish = null;
      for await (const chunk of stream) {
        for (const c of chunk.choices) {
          text += c.text;
          pieces += c.text ? 1 : 0;
          finish = c.finish_reason ?? finish;
        }
      }
      assert.equal(text, want.text);
      assert.ok(pieces >= 5, `${pieces} pieces`);
      assert.equal(finish, "length");
    });

    test("chat.completions.create, streamed and not, equals the reference of the rendered prompt", async () => {
      const messages = [
        { role: "system", content: "You are terse." },
        { role: "user", content: "Name a prime." },
      ];
      // The documented plain default template (docs/serving.md): these models' presets carry no
      // chat template.
      const rendered = "You are terse.\n\nUser: Name a prime.\nAssistant:";
      const want = reference(model, rendered, 16);
      const got = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
      assert.equal(got.object, "chat.completion");
      assert.equal(got.choices[0].message.role, "assistant");
      assert.equal(got.choices[0].message.content, want.text);
      const stream = await client.chat.completions.create({
        model, messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
      });
      let text = "";
      let usage = null;
      let role = null;
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) {
          role = c.delta.role ?? role;
          text += c.delta.content ?? "";
        }
      }
      assert.equal(role, "assistant");
      assert.equal(text, want.text);
      assert.equal(usage.completion_tokens, 16);
    });

    test("seeded sampling repeats; errors arrive as the client's error classes", async () => {
      const ask = () =>
        client.completions.create({ model, prompt: "random", max_tokens: 12, temperature: 1, top_p: 0.9, seed: 5 });
      assert.equal((await ask()).choices[0].text, (await ask()).choices[0].text);
      await assert.rejects(
        client.completions.create({ model: "gpt-4", prompt: "x", max_tokens: 2 }),
        (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found",
      );
      await assert.rejects(
        client.completions.create({ model, prompt: "x", max_tokens: 2, temperature: 5 }),
        (e) => e instanceof OpenAI.BadRequestError && e.param === "temperature",
      );
      await assert.rejects(
        client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], max_tokens: 100000 }),
        (e) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded",
      );
    });

    test("completions with logprobs + echo, n = 3 with a seed, chat with logprobs and top_logprobs", async () => {
      const prompt = "The tile emulator answered";
      const want = reference(model, prompt, 6);
      const got = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, echo: true, logprobs: 2 });
      const c = got.choices[0];
      assert.equal(c.text, prompt + want.text);
      const lp = c.logprobs;
      assert.equal(lp.tokens.length, got.usage.prompt_tokens + 6);
      assert.equal(lp.token_logprobs[0], null);
      for (let i = 1; i < lp.tokens.length; i++) {
        assert.ok(lp.token_logprobs[i] <= 0, `token ${i}: ${lp.token_logprobs[i]}`);
        assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
        assert.equal(Object.keys(lp.top_logprobs[i]).length <= 2, true);
      }
      // Greedy: each generated token is its position's most likely one.
      for (let i = got.usage.prompt_tokens; i < lp.tokens.length; i++) {
        const best = Math.max(...Object.values(lp.top_logprobs[i]));
        assert.ok(Math.abs(best - lp.token_logprobs[i]) < 1e-6, `token ${i}`);
      }
      // Scoring only (lm-evaluation-harness): max_tokens 0 with echo gives the same prompt numbers.
      const scored = await client.completions.create({ model, prompt, max_tokens: 0, echo: true, logprobs: 1 });
      assert.equal(scored.usage.completion_tokens, 0);
      for (let i = 1; i < scored.usage.prompt_tokens; i++)
        assert.ok(Math.abs(scored.choices[0].logprobs.token_logprobs[i] - lp.token_logprobs[i]) < 1e-4, `token ${i}`);
      // n = 3 with a seed: choice i is a lone request with seed + i.
      const ask = { model, prompt: "random", max_tokens: 8, temperature: 1 };
      const three = await client.completions.create({ ...ask, n: 3, seed: 11 });
      assert.equal(three.choices.length, 3);
      for (let i = 0; i < 3; i++) {
        const lone = await client.completions.create({ ...ask, seed: 11 + i });
        assert.equal(three.choices[i].index, i);
        assert.equal(three.choices[i].text, lone.choices[0].text);
      }
      const chat = await client.chat.completions.create({
        model, messages: [{ role: "user", content: "Name a prime." }], max_tokens: 5, temperature: 0,
        logprobs: true, top_logprobs: 2,
      });
      const content = chat.choices[0].logprobs.content;
      assert.equal(content.length, chat.usage.completion_tokens);
      for (const t of content) {
        assert.equal(t.top_logprobs.length, 2);
        assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6);  // greedy: the most likely
        assert.ok(Array.isArray(t.bytes));
      }
      await assert.rejects(
        client.completions.create({ model, prompt: "x", max_tokens: 2, n: 2, best_of: 1 }),
        (e) => e instanceof OpenAI.BadRequestError && e.param === "best_of",
      );
    });

    if (program === "tessera-gpu") {
      test("the GPU process reports its latencies on the modelled clock too", async () => {
        const text = await (await fetch(`${server.url}/metrics`)).text();
        const value = (name) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
        assert.ok(value("tessera_llm_modelled_time_to_first_token_seconds_count") >= 4, text);
        assert.ok(value("tessera_llm_modelled_seconds_total") > 0, text);
        // A modelled A100 runs llama-tiny's steps far faster than this CPU does.
        assert.ok(value("tessera_llm_modelled_step_duration_seconds_sum") < value("tessera_llm_step_duration_seconds_sum"), text);
      });
    }
  });
}
