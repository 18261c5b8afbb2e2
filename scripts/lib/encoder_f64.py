"""The BERT-family encoder in float64 numpy, shared by the encoder goldens scripts (BERT embeddings
and rerankers, RoBERTa / XLM-R): an oracle independent of tessera's C++, written once.

    from encoder_f64 import encoder, encoder_params, erf
"""
import math

import numpy as np


def erf(x):
    return np.vectorize(math.erf)(x)


def encoder(p, prefix, ids, types, positions, cfg):
    """The last hidden state [L, h] of one sequence, every token attended (no padding, no mask).

    p: name -> float64 array (Hugging Face names under prefix); types and positions: one id per
    token (BERT counts positions from 0, RoBERTa from its padding id + 1)."""
    h, nh, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    d, L = h // nh, len(ids)
    g = lambda name: p[prefix + name]
    lin = lambda x, name: x @ g(name + ".weight").T + g(name + ".bias")

    def ln(x, name):
        mu = x.mean(-1, keepdims=True); var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g(name + ".weight") + g(name + ".bias")

    x = g("embeddings.word_embeddings.weight")[ids] + g("embeddings.token_type_embeddings.weight")[types] \
        + g("embeddings.position_embeddings.weight")[positions]
    x = ln(x, "embeddings.LayerNorm")
    for l in range(cfg["num_hidden_layers"]):
        pre = f"encoder.layer.{l}."
        q, k, v = (lin(x, pre + "attention.self." + n).reshape(L, nh, d).transpose(1, 0, 2)
                   for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(L, h)
        x = ln(lin(ctx, pre + "attention.output.dense") + x, pre + "attention.output.LayerNorm")
        a = lin(x, pre + "intermediate.dense")
        x = ln(lin(0.5 * a * (1 + erf(a / math.sqrt(2))), pre + "output.dense") + x, pre + "output.LayerNorm")
    return x


def encoder_params(n, prefix, vocab_size, cfg, attn_std=0.2):
    """The embeddings and layers of a seeded BERT-family checkpoint (Hugging Face names under
    prefix), drawn by n(*shape, std=...) in this order, so that a script's seed gives the same
    checkpoint whatever draws it makes after (pooler, head). n: numpy or torch draws."""
    h, f, L, P = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["max_position_embeddings"]
    p = {prefix + "embeddings.word_embeddings.weight": n(vocab_size, h, std=0.5),
         prefix + "embeddings.position_embeddings.weight": n(P, h, std=0.5),
         prefix + "embeddings.token_type_embeddings.weight": n(cfg["type_vocab_size"], h, std=0.5),
         prefix + "embeddings.LayerNorm.weight": 1 + n(h), prefix + "embeddings.LayerNorm.bias": n(h)}
    for l in range(L):
        pre = f"{prefix}encoder.layer.{l}."
        for name in ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"]:
            p[pre + name + ".weight"] = n(h, h, std=attn_std); p[pre + name + ".bias"] = n(h, std=0.05)
        p[pre + "attention.output.LayerNorm.weight"] = 1 + n(h); p[pre + "attention.output.LayerNorm.bias"] = n(h)
        p[pre + "intermediate.dense.weight"] = n(f, h, std=0.15); p[pre + "intermediate.dense.bias"] = n(f, std=0.05)
        p[pre + "output.dense.weight"] = n(h, f, std=0.1); p[pre + "output.dense.bias"] = n(h, std=0.05)
        p[pre + "output.LayerNorm.weight"] = 1 + n(h); p[pre + "output.LayerNorm.bias"] = n(h)
    return p
