#!/usr/bin/python3
"""Seeded RoBERTa / XLM-RoBERTa checkpoints and their goldens (tests/data/models/), numpy only.

usage: /usr/bin/python3 scripts/make_roberta_goldens.py [--out tests/data/models]

Writes three Hugging Face folders:
  tiny-roberta-cls/  RobertaForSequenceClassification (model_type roberta, 3 labels): "roberta."
                     names, the head as RoBERTa stores it (classifier.dense, classifier.out_proj), no
                     pooler (RoBERTa's classifier has none)
  tiny-xlmr-embed/   a sentence-transformers folder over an XLMRobertaModel (no head; names without a
                     prefix, pooler stored and unused): modules.json (Transformer, Pooling mean,
                     Normalize), 1_Pooling/config.json
  tiny-xlmr-rerank/  a one-label XLMRobertaForSequenceClassification cross-encoder ("roberta." names,
                     a stored roberta.pooler that the head does not use)
all with pad_token_id 1 (<s> 0, </s> 2), type_vocab_size 1, layer_norm_eps 1e-5 and
max_position_embeddings 34 (so 32 tokens: positions start at pad_token_id + 1 = 2),
and tiny_roberta_goldens.json: batches of token ids; the classifier's logits, the embedding
model's token states, mean-pooled vectors and normalized vectors, the reranker's raw scores.

The forward is Hugging Face's RobertaModel written out in float64 numpy, independent of tessera's
C++: positions are create_position_ids_from_input_ids (a pad token at padding_idx, the k-th
non-pad token at padding_idx + k; every token attended: no padding to mask), post-LN, erf GELU,
LayerNorm eps 1e-5; RobertaClassificationHead: dense + tanh + out_proj on the <s> token.
Tolerance: 1e-4 absolute against tessera's fp32 forward.
"""
import json, math, os, sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from goldens_io import write_json, write_safetensors, rounded, models_out_dir, write_sentence_transformers  # noqa: E402
from encoder_f64 import encoder as encoder_f64, encoder_params  # noqa: E402

PAD, BOS, EOS = 1, 0, 2
CFG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=56,
           max_position_embeddings=34, type_vocab_size=1, layer_norm_eps=1e-5, hidden_act="gelu",
           pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
MAX_LEN = CFG["max_position_embeddings"] - PAD - 1
VOCAB = {"roberta": 320, "xlm-roberta": 260}
LABELS = ["negative", "neutral", "positive"]


def init_params(vocab_size, rng, prefix, head, pooler):
    h = CFG["hidden_size"]
    n = lambda *shape, std=0.1: rng.standard_normal(shape) * std
    p = encoder_params(n, prefix, vocab_size, CFG)
    if pooler:  # stored by some checkpoints; neither the embedding model nor RoBERTa's head uses it
        p[prefix + "pooler.dense.weight"] = n(h, h, std=3.0); p[prefix + "pooler.dense.bias"] = n(h, std=3.0)
    if head:
        p["classifier.dense.weight"] = n(h, h, std=0.15); p["classifier.dense.bias"] = n(h, std=0.05)
        p["classifier.out_proj.weight"] = n(head, h, std=0.5); p["classifier.out_proj.bias"] = n(head, std=0.1)
    return {k: v.astype(np.float32).astype(np.float64) for k, v in p.items()}


def position_ids(ids):
    """HF create_position_ids_from_input_ids (past_key_values_length 0)."""
    mask = (np.asarray(ids) != PAD).astype(np.int64)
    return np.cumsum(mask) * mask + PAD


def encoder(p, prefix, ids):
    """RobertaModel's last hidden state [L, h] of one sequence (all tokens attended), float64:
    one token type, positions counted from the padding id + 1."""
    return encoder_f64(p, prefix, ids, np.zeros(len(ids), int), position_ids(ids), CFG)


def head(p, x):
    """RobertaClassificationHead on the <s> token (dropout off)."""
    y = np.tanh(x[0] @ p["classifier.dense.weight"].T + p["classifier.dense.bias"])
    return y @ p["classifier.out_proj.weight"].T + p["classifier.out_proj.bias"]


def make_seqs(vocab_size, rng):
    def seq(L):
        ids = rng.integers(3, vocab_size, L).tolist()
        ids[0] = BOS
        if L > 1: ids[-1] = EOS
        return ids
    mixed = [seq(L) for L in rng.permutation(np.arange(1, MAX_LEN + 1)).tolist()]
    short = [seq(L) for L in (1, 2, 3, 7, 5)]
    # Pad tokens inside a sequence sit at position padding_idx and do not advance the count.
    short.append([BOS, 17, PAD, 40, PAD, PAD, 99, EOS])
    short.append([BOS, PAD])
    return {"mixed_1_to_max": mixed, "short": short}


def flat(seqs):
    return [i for s in seqs for i in s], [len(s) for s in seqs]


def base_config(model_type, arch, vocab_size, **extra):
    return dict(architectures=[arch], model_type=model_type, vocab_size=vocab_size, **CFG, **extra)


def main():
    out = models_out_dir(__file__)
    rng = np.random.default_rng(2812)

    cls_dir = os.path.join(out, "tiny-roberta-cls")
    os.makedirs(cls_dir, exist_ok=True)
    write_json(os.path.join(cls_dir, "config.json"), base_config(
        "roberta", "RobertaForSequenceClassification", VOCAB["roberta"],
        id2label={str(i): n for i, n in enumerate(LABELS)}, label2id={n: i for i, n in enumerate(LABELS)}))
    pc = init_params(VOCAB["roberta"], rng, "roberta.", len(LABELS), False)
    write_safetensors(os.path.join(cls_dir, "model.safetensors"), pc)

    emb = os.path.join(out, "tiny-xlmr-embed")
    os.makedirs(emb, exist_ok=True)
    write_json(os.path.join(emb, "config.json"), base_config("xlm-roberta", "XLMRobertaModel", VOCAB["xlm-roberta"]))
    write_sentence_transformers(emb, CFG["hidden_size"])
    pe = init_params(VOCAB["xlm-roberta"], rng, "", 0, True)
    write_safetensors(os.path.join(emb, "model.safetensors"), pe)

    rr = os.path.join(out, "tiny-xlmr-rerank")
    os.makedirs(rr, exist_ok=True)
    write_json(os.path.join(rr, "config.json"), base_config(
        "xlm-roberta", "XLMRobertaForSequenceClassification", VOCAB["xlm-roberta"],
        id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0}))
    pr = init_params(VOCAB["xlm-roberta"], rng, "roberta.", 1, True)
    write_safetensors(os.path.join(rr, "model.safetensors"), pr)

    goldens = {"classifier_model": "tiny-roberta-cls", "embed_model": "tiny-xlmr-embed",
               "rerank_model": "tiny-xlmr-rerank", "tolerance": 1e-4, "labels": LABELS,
               "classifier_batches": [], "embed_batches": [], "rerank_batches": []}
    for name, seqs in make_seqs(VOCAB["roberta"], rng).items():
        ids, lengths = flat(seqs)
        logits = [head(pc, encoder(pc, "roberta.", np.array(s))) for s in seqs]
        goldens["classifier_batches"].append({"name": name, "token_ids": ids, "lengths": lengths,
                                              "logits": rounded(np.stack(logits))})
    for name, seqs in make_seqs(VOCAB["xlm-roberta"], rng).items():
        ids, lengths = flat(seqs)
        hs = [encoder(pe, "", np.array(s)) for s in seqs]
        mean = np.stack([x.mean(0) for x in hs])
        goldens["embed_batches"].append({"name": name, "token_ids": ids, "lengths": lengths,
                                         "tokens": rounded(np.concatenate(hs)), "mean": rounded(mean),
                                         "mean_normalized": rounded(mean / np.linalg.norm(mean, axis=1, keepdims=True))})
    for name, seqs in make_seqs(VOCAB["xlm-roberta"], rng).items():
        ids, lengths = flat(seqs)
        scores = [head(pr, encoder(pr, "roberta.", np.array(s)))[0] for s in seqs]
        goldens["rerank_batches"].append({"name": name, "token_ids": ids, "lengths": lengths,
                                          "scores": rounded(scores)})
    with open(os.path.join(out, "tiny_roberta_goldens.json"), "w") as f:
        json.dump(goldens, f); f.write("\n")


if __name__ == "__main__":
    main()
