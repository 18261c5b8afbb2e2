#!/usr/bin/python3
"""Golden logits and greedy tokens for tessera's decoder tests (tests/data/models/decoders/goldens.json).

usage: OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 models/scripts/make_decoder_goldens.py \
           [--bin build/bin/tessera-models] [--data tests/data/models/decoders]

For each <name>.config.json in the data folder (odd shapes: head_dim not dividing the width, GQA
ratio 3, FFN not a multiple of 64, linear rope scaling, tied and untied heads), tessera-models writes
its seeded weights as a Hugging Face folder (config.json + model.safetensors); this script reads
that folder and runs its own plain PyTorch forward, written from the papers and Hugging Face's
config semantics, in float64:
  GPT-2 (Radford et al. 2019): learned positions, pre-LayerNorm, Conv1D weights x @ W + b with W
    [in, out], tanh-approximated GELU ("gelu_new"), causal attention scaled by 1/sqrt(head_dim),
    final LayerNorm, LM head = wte (tied).
  LLaMA (Touvron et al. 2023): RMSNorm, rotary embeddings (Su et al. 2021) with HF's rotate_half
    pairing (i, i + d/2), inv_freq = theta^(-2i/d), positions divided by rope_scaling.factor when
    linear; grouped-query attention (query head h reads kv head h // (heads / kv_heads)); SwiGLU
    MLP down(silu(gate(x)) * up(x)); final RMSNorm; LM head lm_head or the tied embedding.
It writes the logits at every prompt position and 32 greedy tokens (each chosen by a full
recomputation) with their top-2 margins. CI needs no torch: the output is committed.
"""
import argparse, json, math, os, struct, subprocess, sys, tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "lib"))
from goldens_io import write_safetensors, write_goldens  # noqa: E402

F64 = torch.float64
PROMPTS = [[1, 17, 250, 3, 99, 42, 7, 128, 200, 5, 66, 31, 2],
           [1, 299, 0, 150, 151, 152, 9, 9, 9, 77, 120, 43, 8, 254, 33, 61, 100, 12, 199, 4]]
GREEDY = 32


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        buf = bytearray(data[base + b:base + e])
        out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(t["shape"]).to(F64)
    return out


def causal_attention(q, k, v):
    """q [T, H, d], k/v [T, H, d] -> [T, H*d]; position i sees 0..i."""
    T, H, d = q.shape
    s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(d)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("hij,jhd->ihd", p, v).reshape(T, H * d)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_logits(cfg, W, ids):
    h, H, L, eps = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["layer_norm_epsilon"]
    d = h // H
    w = lambda n: W["transformer." + n]
    T = len(ids)
    x = w("wte.weight")[ids] + w("wpe.weight")[torch.arange(T)]
    for l in range(L):
        p = f"h.{l}."
        a = layer_norm(x, w(p + "ln_1.weight"), w(p + "ln_1.bias"), eps)
        qkv = a @ w(p + "attn.c_attn.weight") + w(p + "attn.c_attn.bias")
        q, k, v = qkv[:, :h], qkv[:, h:2 * h], qkv[:, 2 * h:]
        ctx = causal_attention(q.reshape(T, H, d), k.reshape(T, H, d), v.reshape(T, H, d))
        x = x + ctx @ w(p + "attn.c_proj.weight") + w(p + "attn.c_proj.bias")
        m = layer_norm(x, w(p + "ln_2.weight"), w(p + "ln_2.bias"), eps)
        m = gelu_new(m @ w(p + "mlp.c_fc.weight") + w(p + "mlp.c_fc.bias"))
        x = x + m @ w(p + "mlp.c_proj.weight") + w(p + "mlp.c_proj.bias")
    x = layer_norm(x, w("ln_f.weight"), w("ln_f.bias"), eps)
    head = W["lm_head.weight"] if not cfg.get("tie_word_embeddings", True) else w("wte.weight")
    return x @ head.T


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate(x, positions, theta, factor):
    """x [T, heads, d]: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1)."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=F64) / d)
    ang = torch.outer(positions.to(F64) / factor, inv_freq)
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def llama_logits(cfg, W, ids):
    h, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    KV = cfg.get("num_key_value_heads") or H
    d = cfg.get("head_dim") or h // H
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling") or {}
    factor = rs["factor"] if rs.get("type", rs.get("rope_type")) == "linear" else 1.0
    T = len(ids)
    pos = torch.arange(T)
    x = W["model.embed_tokens.weight"][ids]
    for l in range(L):
        p = f"model.layers.{l}."
        a = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (a @ W[p + "self_attn.q_proj.weight"].T).reshape(T, H, d)
        k = (a @ W[p + "self_attn.k_proj.weight"].T).reshape(T, KV, d)
        v = (a @ W[p + "self_attn.v_proj.weight"].T).reshape(T, KV, d)
        q, k = rotate(q, pos, theta, factor), rotate(k, pos, theta, factor)
        group = H // KV
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        x = x + causal_attention(q, k, v) @ W[p + "self_attn.o_proj.weight"].T
        m = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = m @ W[p + "mlp.gate_proj.weight"].T
        m = (g * torch.sigmoid(g) * (m @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        x = x + m
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    return x @ head.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/tessera-models")
    ap.add_argument("--data", default="tests/data/models/decoders")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    out = {"generated_by": "models/scripts/make_decoder_goldens.py (plain PyTorch, float64)",
           "seed": args.seed, "greedy_tokens": GREEDY, "models": {}}
    for fname in sorted(os.listdir(args.data)):
        if not fname.endswith(".config.json"):
            continue
        name = fname[: -len(".config.json")]
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([args.bin, "generate", "--config", os.path.join(args.data, fname),
                            "--seed", str(args.seed), "--save", tmp], check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(tmp, "config.json")) as f:
                cfg = json.load(f)
            W = read_safetensors(os.path.join(tmp, "model.safetensors"))
        fwd = gpt2_logits if cfg["model_type"] == "gpt2" else llama_logits
        prompts = []
        for base_ids in PROMPTS:
            ids = [i % cfg["vocab_size"] for i in base_ids]
            with torch.no_grad():
                logits = fwd(cfg, W, torch.tensor(ids))
                seq, tokens, margins = list(ids), [], []
                for _ in range(GREEDY):
                    last = fwd(cfg, W, torch.tensor(seq))[-1]
                    top = torch.topk(last, 2)
                    tokens.append(int(top.indices[0]))
                    margins.append(float(top.values[0] - top.values[1]))
                    seq.append(tokens[-1])
            prompts.append({"ids": ids,
                            "logits": [[float("%.7g" % v) for v in row.tolist()] for row in logits],
                            "greedy": tokens, "margins": [float("%.4g" % m) for m in margins]})
            print(f"{name}: prompt of {len(ids)}: greedy {tokens[:8]}... "
                  f"{len(set(tokens))} distinct, min margin {min(margins):.2e}", file=sys.stderr)
        out["models"][name] = {"config": fname, "prompts": prompts}
    path = os.path.join(args.data, "goldens.json")
    write_goldens(path, out)


if __name__ == "__main__":
    main()
