#!/usr/bin/python3
"""Seeded embedding and reranker checkpoints and their goldens (tests/data/models/), numpy only.

usage: /usr/bin/python3 scripts/make_embedding_goldens.py [--out tests/data/models]

Writes two Hugging Face folders sharing tiny-odd's vocab.txt (run make_model_goldens.py first):
  tiny-embed/    a sentence-transformers folder: config.json (BertModel: no head), model.safetensors
                 (names without "bert.", pooler included as sentence-transformers saves it, unused),
                 modules.json (Transformer, Pooling, Normalize), 1_Pooling/config.json (mean),
                 2_Normalize/, config_sentence_transformers.json (prompts "query", "passage"),
                 hidden 40 = 5 heads x 8, intermediate 72, 2 layers, 32 positions
  tiny-rerank/   a one-label cross-encoder (BertForSequenceClassification, num_labels 1, "bert." names)
and tiny_embed_goldens.json: batches of token/type ids; for tiny-embed, every token's final hidden
state and the pooled vector of each pooling mode (cls, mean, max, mean_sqrt_len, lasttoken; before
normalization) and the mean vectors L2-normalized; for tiny-rerank, the raw score of each pair.

The forward here is Hugging Face BertModel's math written out in float64 numpy (post-LN, erf GELU,
each sequence on its own: no padding to mask), independent of tessera's C++ code; pooling follows
sentence-transformers' Pooling module. Tolerance: 1e-4 absolute against tessera's fp32 forward.
"""
import json, math, os, shutil, struct, sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from goldens_io import write_safetensors, write_goldens, write_json, rounded, models_out_dir, write_sentence_transformers  # noqa: E402
from encoder_f64 import encoder as encoder_f64, encoder_params  # noqa: E402

CFG = dict(hidden_size=40, num_hidden_layers=2, num_attention_heads=5, intermediate_size=72,
           max_position_embeddings=32, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu")
MODES = ["cls", "mean", "max", "mean_sqrt_len", "lasttoken"]
PROMPTS = {"query": "query: ", "passage": "passage: "}


def init_params(vocab_size, rng, prefix, num_labels):
    h = CFG["hidden_size"]
    n = lambda *shape, std=0.1: rng.standard_normal(shape) * std
    p = encoder_params(n, prefix, vocab_size, CFG)
    p[prefix + "pooler.dense.weight"] = n(h, h, std=0.15); p[prefix + "pooler.dense.bias"] = n(h, std=0.05)
    if num_labels:
        p["classifier.weight"] = n(num_labels, h, std=0.5); p["classifier.bias"] = n(num_labels, std=0.1)
    # What the checkpoint stores is fp32: compute the goldens from exactly those values.
    return {k: v.astype(np.float32).astype(np.float64) for k, v in p.items()}


def encoder(p, prefix, ids, types):
    """BertModel's last hidden state [L, h] of one sequence (no padding, so no mask), float64."""
    return encoder_f64(p, prefix, ids, types, np.arange(len(ids)), CFG)


def pool(x, mode):
    """sentence-transformers' Pooling over one sequence's token vectors (all tokens attended)."""
    if mode == "cls": return x[0]
    if mode == "mean": return x.mean(0)
    if mode == "max": return x.max(0)
    if mode == "mean_sqrt_len": return x.sum(0) / math.sqrt(len(x))
    if mode == "lasttoken": return x[-1]
    raise ValueError(mode)


def make_seqs(vocab_size, rng, pairs):
    P = CFG["max_position_embeddings"]
    def seq(L):
        ids = rng.integers(0, vocab_size, L).tolist(); ids[0] = 12  # [CLS]
        cut = L // 2 if (pairs and L >= 4) else L
        return ids, [0] * cut + [1] * (L - cut)
    mixed = [seq(L) for L in rng.permutation(np.arange(1, P + 1)).tolist()]
    return {"mixed_1_to_max": mixed, "short": [seq(L) for L in (1, 2, 3, 7, 5)]}


def flat(seqs):
    return [i for a, _ in seqs for i in a], [t for _, ts in seqs for t in ts], [len(a) for a, _ in seqs]


def main():
    out = models_out_dir(__file__)
    vocab_path = os.path.join(out, "tiny-odd", "vocab.txt")
    with open(vocab_path, encoding="utf-8") as f:
        vocab_size = len(f.read().splitlines())
    rng = np.random.default_rng(2311)
    base = dict(model_type="bert", vocab_size=vocab_size, **CFG)

    emb = os.path.join(out, "tiny-embed")
    os.makedirs(emb, exist_ok=True)
    write_json(os.path.join(emb, "config.json"), dict(architectures=["BertModel"], **base))
    write_sentence_transformers(emb, CFG["hidden_size"])
    write_json(os.path.join(emb, "config_sentence_transformers.json"),
               {"prompts": PROMPTS, "default_prompt_name": None, "similarity_fn_name": "cosine"})
    write_json(os.path.join(emb, "tokenizer_config.json"), {"do_lower_case": True, "tokenizer_class": "BertTokenizer"})
    shutil.copyfile(vocab_path, os.path.join(emb, "vocab.txt"))
    pe = init_params(vocab_size, rng, "", 0)
    write_safetensors(os.path.join(emb, "model.safetensors"), pe)

    rr = os.path.join(out, "tiny-rerank")
    os.makedirs(rr, exist_ok=True)
    write_json(os.path.join(rr, "config.json"), dict(architectures=["BertForSequenceClassification"],
                                                      id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0}, **base))
    write_json(os.path.join(rr, "tokenizer_config.json"), {"do_lower_case": True, "tokenizer_class": "BertTokenizer"})
    shutil.copyfile(vocab_path, os.path.join(rr, "vocab.txt"))
    pr = init_params(vocab_size, rng, "bert.", 1)
    write_safetensors(os.path.join(rr, "model.safetensors"), pr)

    goldens = {"embed_model": "tiny-embed", "rerank_model": "tiny-rerank", "tolerance": 1e-4,
               "embed_batches": [], "rerank_batches": []}
    for name, seqs in make_seqs(vocab_size, rng, False).items():
        ids, types, lengths = flat(seqs)
        hs = [encoder(pe, "", np.array(a), np.array(t)) for a, t in seqs]
        entry = {"name": name, "token_ids": ids, "token_type_ids": types, "lengths": lengths,
                 "tokens": rounded(np.concatenate(hs)), "pooled": {}}
        for m in MODES:
            entry["pooled"][m] = rounded(np.stack([pool(x, m) for x in hs]))
        mean = np.stack([pool(x, "mean") for x in hs])
        entry["mean_normalized"] = rounded(mean / np.linalg.norm(mean, axis=1, keepdims=True))
        goldens["embed_batches"].append(entry)
    for name, seqs in make_seqs(vocab_size, rng, True).items():
        ids, types, lengths = flat(seqs)
        scores = []
        for a, t in seqs:
            x = encoder(pr, "bert.", np.array(a), np.array(t))
            pooled = np.tanh(x[0] @ pr["bert.pooler.dense.weight"].T + pr["bert.pooler.dense.bias"])
            scores.append((pooled @ pr["classifier.weight"].T + pr["classifier.bias"])[0])
        goldens["rerank_batches"].append({"name": name, "token_ids": ids, "token_type_ids": types,
                                          "lengths": lengths, "scores": rounded(scores)})
    with open(os.path.join(out, "tiny_embed_goldens.json"), "w") as f:
        json.dump(goldens, f); f.write("\n")


if __name__ == "__main__":
    main()
