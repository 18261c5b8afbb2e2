// Starting a real tessera-serve for the client tests, and the reference forward to compare its
// answers with (tessera-models: the models library's tokenizer and forward, in another process,
// sharing no code with the server's batching or HTTP path).
//
//   const server = await startServer(["--model", "bert-tiny"]);
//   const logits = referenceLogits("bert-tiny", "some text", "optional pair");
//   const [a, b] = referenceBatch("bert-tiny", [["text"], ["question", "answer"]]);
//   await server.stop();
//   describe("...", () => { const server = serverForSuite(["--model", "bert-tiny"]); ... });
import { spawn, execFileSync } from "node:child_process";
import { after, before } from "node:test";
import { createInterface } from "node:readline";
import path from "node:path";

const binDir = process.env.TESSERA_BIN_DIR;
if (!binDir) throw new Error("TESSERA_BIN_DIR is not set: run these tests through ctest, or set it to build/bin");

export function bin(name) {
  return path.join(binDir, name);
}

/// Starts tessera-serve (or `program`, e.g. "tessera-gpu" with --serve) on a free loopback port;
/// resolves once it prints its listening line.
export function startServer(args = [], program = "tessera-serve") {
  const child = spawn(bin(program), ["--port", "0", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${program} printed no listening line in 30 s: ${stderr}`));
    }, 30000);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${program} exited (${code ?? signal}) before listening: ${stderr}`));
    });
    const lines = createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      const m = /^listening on (https?):\/\/([^ ]+):(\d+) model/.exec(line);
      if (!m) return;
      clearTimeout(timer);
      const url = `${m[1]}://127.0.0.1:${m[3]}`;
      resolve({
        url,
        stop: async () => {
          child.kill("SIGTERM");
          const { code, signal } = await exited;
          if (code !== 0) throw new Error(`${program} exited with ${code ?? signal}: ${stderr}`);
        },
      });
    });
  });
}

/// A server for the tests of the describe block that calls this: started before them, stopped
/// (its exit code checked) after them. Its url is there once the tests run.
export function serverForSuite(args = [], program = "tessera-serve") {
  const server = {};
  before(async () => {
    Object.assign(server, await startServer(args, program));
  });
  after(async () => {
    await server.stop?.();
  });
  return server;
}

/// Logits of the reference forward for one text (or pair): {LABEL_0: x, LABEL_1: y, ...}.
export function referenceLogits(model, text, pair) {
  return referenceBatch(model, [[text, pair]])[0];
}

/// Logits of the reference forward for each of `sequences` ([text] or [text, pair]), in order.
/// One tessera-models process for all the single texts and one per distinct pair text (its
/// --pair goes with every --text), as each process start costs about a second on a loaded machine;
/// a sequence asked for before is answered from memory.
const known = new Map();  // JSON [model, text, pair] -> logits
export function referenceBatch(model, sequences) {
  const key = ([text, pair]) => JSON.stringify([model, text, pair ?? null]);
  const groups = new Map();  // pair text (or undefined) -> indices into sequences
  sequences.forEach(([text, pair], i) => {
    if (known.has(key([text, pair]))) return;
    if (!groups.has(pair)) groups.set(pair, []);
    groups.get(pair).push(i);
  });
  const result = sequences.map((s) => known.get(key(s)));
  for (const [pair, indices] of groups) {
    const args = ["--model", model, "--threads", "1"];
    for (const i of indices) args.push("--text", sequences[i][0]);
    if (pair !== undefined) args.push("--pair", pair);
    const out = execFileSync(bin("tessera-models"), args, { encoding: "utf8" });
    indices.forEach((seq, k) => {
      const line = out.split("\n").find((l) => l.startsWith(`logits[${k}]:`));
      if (!line) throw new Error(`no logits[${k}] in tessera-models output: ${out}`);
      const logits = {};
      for (const m of line.slice(line.indexOf(":") + 1).matchAll(/(\S+)=(-?[0-9.]+(?:e[-+]?\d+)?)/g)) logits[m[1]] = Number(m[2]);
      result[seq] = logits;
      known.set(key(sequences[seq]), logits);
    });
  }
  return result;
}

/// TEI's scores: softmax over several labels, sigmoid over one.
export function scores(logits) {
  const labels = Object.keys(logits);
  if (labels.length === 1) return { [labels[0]]: 1 / (1 + Math.exp(-logits[labels[0]])) };
  const max = Math.max(...Object.values(logits));
  const exp = Object.fromEntries(labels.map((l) => [l, Math.exp(logits[l] - max)]));
  const sum = Object.values(exp).reduce((a, b) => a + b, 0);
  return Object.fromEntries(labels.map((l) => [l, exp[l] / sum]));
}
