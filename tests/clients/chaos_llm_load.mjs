// LLM streams under network faults, through npm's `openai` client (helper of scripts/cluster/chaos):
//   node tests/clients/chaos_llm_load.mjs PORT DIR [CLIENTS]
// First every prompt once, streamed, before any fault: that text is the reference (greedy,
// temperature 0). Then CLIENTS closed-loop streams (default 3) while DIR/load exists, until
// DIR/stop exists. Each stream is checked: its text must equal the reference and it must end with
// finish_reason "length" (max_tokens reached, no EOS in llama-tiny's seeded weights' first
// tokens: the reference says which); an error event (the client throws) counts as an error with
// its message, a stream that ends early or differs as wrong (a silent truncation would show here).
// Writes DIR/llm_requests.csv (start,end,status,right: status 200, or 0 for an error) and
// DIR/llm_stats.json ({sent, ok, wrong, errors, problems}); DIR/llm_ready once the reference is in.
import OpenAI from "openai";
import fs from "node:fs";

const [port, dir, clientsArg] = process.argv.slice(2);
if (!port || !dir) {
  console.error("usage: chaos_llm_load.mjs PORT DIR [CLIENTS]");
  process.exit(2);
}
const clients = Number(clientsArg || 3);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", maxRetries: 0, timeout: 180000 });
const prompts = ["The partition healed and the tile", "Once upon a time in a network namespace",
                 "A stream whose replica is lost", "tessera serves", "Every token counts because",
                 "The host noticed the closed connection"];
const maxTokens = 24;
const exists = f => fs.existsSync(`${dir}/${f}`);
const sleep = ms => new Promise(r => setTimeout(r, ms));

async function stream(model, prompt) {
  const s = await client.completions.create({ model, prompt, max_tokens: maxTokens, temperature: 0, stream: true });
  let text = "", finish = null;
  for await (const chunk of s) {
    const c = chunk.choices?.[0];
    if (!c) continue;
    text += c.text ?? "";
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish };
}

const models = await client.models.list();
const model = models.data[0].id;
const want = [];
for (const p of prompts) {
  const r = await stream(model, p);
  if (!r.finish) throw new Error(`reference for '${p}' ended without a finish_reason`);
  want.push(r);
}
fs.writeFileSync(`${dir}/llm_reference.json`, JSON.stringify({ model, prompts, want }, null, 1));
fs.writeFileSync(`${dir}/llm_ready`, "");

const stats = { sent: 0, ok: 0, wrong: 0, errors: 0, problems: [] };
const rows = [];
const dump = () => {
  fs.writeFileSync(`${dir}/llm_stats.json`, JSON.stringify(stats));
  fs.writeFileSync(`${dir}/llm_requests.csv`,
                   "start,end,status,right\n" + rows.map(r => r.join(",")).join("\n") + (rows.length ? "\n" : ""));
};
async function worker(i) {
  let k = i;
  while (!exists("stop")) {
    if (!exists("load")) { await sleep(10); continue; }
    k = (k * 5 + 1) % prompts.length;
    stats.sent++;
    const t0 = Date.now() / 1000;
    let status = 200, right = false;
    try {
      const r = await stream(model, prompts[k]);
      right = r.text === want[k].text && r.finish === want[k].finish;
      if (right) stats.ok++;
      else {
        stats.wrong++;
        stats.problems.push(`${t0.toFixed(3)} wrong ${k}: ${JSON.stringify(r)} want ${JSON.stringify(want[k])}`);
      }
    } catch (e) {
      status = 0;
      stats.errors++;
      stats.problems.push(`${t0.toFixed(3)} error ${k}: ${String(e.message || e).slice(0, 200)}`);
    }
    rows.push([t0.toFixed(4), (Date.now() / 1000).toFixed(4), status, right ? 1 : 0]);
  }
}
const timer = setInterval(dump, 500);
await Promise.all(Array.from({ length: clients }, (_, i) => worker(i)));
clearInterval(timer);
dump();
