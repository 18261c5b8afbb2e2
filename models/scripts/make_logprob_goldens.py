#!/usr/bin/python3
"""Log-probability goldens for tessera's OpenAI logprobs/echo (tests/data/models/decoders/logprob_goldens.json).

usage: /usr/bin/python3 models/scripts/make_logprob_goldens.py [--data tests/data/models/decoders]

Reads goldens.json (logits at every prompt position from make_decoder_goldens.py's plain float64
PyTorch forward of the seeded checkpoints) and computes, with numpy in float64 (no torch needed):
  prompt_logprobs[i]  log-softmax of the logits row at position i-1, at token ids[i] (i >= 1;
                      entry 0 is null, as OpenAI's echo gives);
  top5[i]             the 5 most likely tokens of that row and their log-probabilities (ties to
                      the lower id);
  loglikelihood       for a split of the prompt into a context ids[:k] and a continuation ids[k:]
                      (k = len // 2), the sum of the continuation's token log-probabilities and
                      whether each continuation token is the row's argmax (lm-evaluation-harness's
                      loglikelihood request: "is_greedy").
The log-softmax is max-shifted: lp = x - max - log(sum(exp(x - max))).
"""
import argparse, json, os

import numpy as np


def log_softmax(row):
    x = np.asarray(row, dtype=np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="tests/data/models/decoders")
    a = ap.parse_args()
    g = json.load(open(os.path.join(a.data, "goldens.json")))
    out = {"generated_by": "models/scripts/make_logprob_goldens.py (numpy float64 log-softmax of goldens.json's logits)",
           "source": "goldens.json", "seed": g["seed"], "top": 5, "models": {}}
    for name, entry in g["models"].items():
        prompts = []
        for p in entry["prompts"]:
            ids, logits = p["ids"], p["logits"]
            assert len(ids) == len(logits)
            lps, tops = [None], [None]
            greedy = [None]
            for i in range(1, len(ids)):
                lp = log_softmax(logits[i - 1])
                lps.append(round(float(lp[ids[i]]), 9))
                order = sorted(range(len(lp)), key=lambda t: (-lp[t], t))[:5]
                tops.append([[int(t), round(float(lp[t]), 9)] for t in order])
                greedy.append(bool(order[0] == ids[i]))
            k = len(ids) // 2
            ll = float(sum(lps[i] for i in range(k, len(ids))))
            prompts.append({"ids": ids, "prompt_logprobs": lps, "top5": tops,
                            "context_tokens": k, "loglikelihood": round(ll, 9),
                            "is_greedy": all(greedy[k:])})
            print(f"{name}: {len(ids)} tokens, continuation {len(ids) - k}, loglikelihood {ll:.6f}")
        out["models"][name] = {"config": entry["config"], "prompts": prompts}
    path = os.path.join(a.data, "logprob_goldens.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
