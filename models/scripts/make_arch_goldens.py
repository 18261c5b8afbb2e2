#!/usr/bin/python3
"""Goldens of the decoder architectures added after LLaMA (Qwen2, Mistral) and of Hugging Face's
rope_scaling types llama3 and yarn, in float64 numpy.

usage: /usr/bin/python3 models/scripts/make_arch_goldens.py [--bin build/bin/tessera-models]
           [--data tests/data/models/decoders] [--out tests/data/models/decoders/arch_goldens.json]

For each config named in CONFIGS (model_type qwen2 or mistral), tessera-models writes its seeded
weights as a Hugging Face folder (config.json + model.safetensors); this script reads the folder
with its own safetensors reader and runs its own forward pass, written from the Hugging Face
modelling semantics of Qwen2ForCausalLM and MistralForCausalLM (not from tessera's C++):
  both: token embedding; per layer x += o(attn(rms(x))); x += down(silu(gate(rms(x))) * up(rms(x)));
    RMSNorm x / sqrt(mean(x^2) + eps) * w; rotary embeddings with rotate_half pairing (i, i + d/2),
    inv_freq = rope_theta^(-2i/d) (rope_theta read from config.json); grouped-query attention
    (query head h reads kv head h // (heads / kv_heads)), scores scaled by 1/sqrt(head_dim);
    final RMSNorm; LM head lm_head.weight, or embed_tokens when tie_word_embeddings.
  Qwen2: q_proj, k_proj and v_proj have biases (o_proj and the MLP none).
  Mistral: sliding-window attention, query at position i sees keys j with i - sliding_window < j <= i
    (Hugging Face's sliding-window causal mask; llama.cpp's SWA is the same).
  rope_scaling (from config.json), written from the definitions in the Llama 3.1 and YaRN papers:
    llama3: a frequency whose wavelength 2 pi / f exceeds original / low_freq_factor is divided by
      factor, one shorter than original / high_freq_factor is kept, and between the two the
      frequency is interpolated linearly in r = original / wavelength between f / factor (at
      r = low_freq_factor) and f (at r = high_freq_factor);
    yarn: dimension pair i is kept when it turns more than beta_fast times over the original
      context, divided by factor when fewer than beta_slow, and blended linearly in i between the
      two bounds (rounded outwards); cos and sin are multiplied by attention_factor
      (default 0.1 ln(factor) + 1).
It writes, per prompt, the logits at every position and 32 greedy tokens (each from a full
recomputation) with their top-2 margins, in the format of goldens.json; for a windowed model also
the greedy tokens (and margins) of the same weights under full causal attention
("greedy_full_attention", "margins_full_attention"), so a
test can show the window changes the answer. CI needs nothing of this: the output is committed.
"""
import argparse, json, os, struct, subprocess, sys, tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "lib"))
from goldens_io import write_safetensors, write_goldens  # noqa: E402

CONFIGS = ["qwen2-odd", "qwen2-untied", "mistral-window", "llama31-rope", "qwen2-yarn"]
PROMPTS = [[1, 17, 250, 3, 99, 42, 7, 128, 200, 5, 66, 31, 2],
           [1, 299, 0, 150, 151, 152, 9, 9, 9, 77, 120, 43, 8, 254, 33, 61, 100, 12, 199, 4]]
GREEDY = 32


def load_safetensors(path):
    raw = open(path, "rb").read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    body = raw[8 + hlen:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {info['dtype']}, expected F32")
        lo, hi = info["data_offsets"]
        tensors[name] = np.frombuffer(body[lo:hi], dtype="<f4").astype(np.float64).reshape(info["shape"])
    return tensors


def rmsnorm(x, gain, eps):
    return gain * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def frequencies(d, theta, scaling, max_positions):
    """The d/2 rotation frequencies and the magnitude of cos/sin under config.json's rope_scaling."""
    base = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
    if kind == "default":
        return base, 1.0
    factor = float(scaling["factor"])
    if kind == "linear":
        return base / factor, 1.0
    if kind == "llama3":
        orig = float(scaling["original_max_position_embeddings"])
        lo, hi = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        r = orig / (2 * np.pi / base)                       # turns over the original context
        t = np.clip((r - lo) / (hi - lo), 0.0, 1.0)          # 0: long wavelengths, 1: short ones
        return base / factor * (1 - t) + base * t, 1.0
    if kind == "yarn":
        orig = float(scaling.get("original_max_position_embeddings") or max_positions)
        fast, slow = float(scaling.get("beta_fast") or 32), float(scaling.get("beta_slow") or 1)
        # The dimension index at which a pair turns n times over the original context.
        at = lambda n: d * np.log(orig / (n * 2 * np.pi)) / (2 * np.log(theta))
        first, last = max(np.floor(at(fast)), 0.0), min(np.ceil(at(slow)), d - 1.0)
        if first == last:
            last += 0.001
        interpolated = np.clip((np.arange(d // 2) - first) / (last - first), 0.0, 1.0)
        mag = scaling.get("attention_factor") or (0.1 * np.log(factor) + 1.0 if factor > 1 else 1.0)
        return base / factor * interpolated + base * (1 - interpolated), float(mag)
    raise SystemExit(f"rope_scaling type {kind} has no golden here")


def rope(x, pos, theta, scaling=None, max_positions=0):
    """x [T, heads, d] rotated by position: x * cos + rotate_half(x) * sin."""
    d = x.shape[-1]
    freq, mag = frequencies(d, theta, scaling, max_positions)
    angle = pos[:, None].astype(np.float64) * freq[None, :]          # [T, d/2]
    cos = mag * np.concatenate([np.cos(angle)] * 2, axis=-1)[:, None, :]
    sin = mag * np.concatenate([np.sin(angle)] * 2, axis=-1)[:, None, :]
    half = d // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def attention(q, k, v, window):
    """q [T, H, d], k/v [T, KV, d]; causal, optionally within a sliding window -> [T, H*d]."""
    T, H, d = q.shape
    kv_heads = k.shape[1]
    out = np.zeros((T, H, d))
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    allowed = j <= i
    if window:
        allowed &= j > i - window
    for h in range(H):
        g = h // (H // kv_heads)
        s = (q[:, h, :] @ k[:, g, :].T) / np.sqrt(d)
        s = np.where(allowed, s, -np.inf)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, h, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, g, :]
    return out.reshape(T, H * d)


def forward(cfg, W, ids, window):
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    d = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    qkv_bias = cfg["model_type"] == "qwen2"
    T = len(ids)
    pos = np.arange(T)
    x = W["model.embed_tokens.weight"][np.array(ids)]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        def proj(name, inp):
            y = inp @ W[p + name + ".weight"].T
            return y + W[p + name + ".bias"] if qkv_bias and name.split(".")[-1] in ("q_proj", "k_proj", "v_proj") else y
        a = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        scaling, maxp = cfg.get("rope_scaling"), cfg.get("max_position_embeddings", 0)
        q = rope(proj("self_attn.q_proj", a).reshape(T, H, d), pos, theta, scaling, maxp)
        k = rope(proj("self_attn.k_proj", a).reshape(T, KV, d), pos, theta, scaling, maxp)
        v = proj("self_attn.v_proj", a).reshape(T, KV, d)
        x = x + attention(q, k, v, window) @ W[p + "self_attn.o_proj.weight"].T
        m = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        gate = m @ W[p + "mlp.gate_proj.weight"].T
        x = x + ((gate / (1.0 + np.exp(-gate))) * (m @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    return x @ head.T


def greedy(cfg, W, ids, window):
    seq, tokens, margins = list(ids), [], []
    for _ in range(GREEDY):
        last = forward(cfg, W, seq, window)[-1]
        order = np.argsort(-last, kind="stable")
        tokens.append(int(order[0]))
        margins.append(float(last[order[0]] - last[order[1]]))
        seq.append(tokens[-1])
    return tokens, margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin/tessera-models")
    ap.add_argument("--data", default="tests/data/models/decoders")
    ap.add_argument("--out", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = {"generated_by": "models/scripts/make_arch_goldens.py (numpy, float64)", "seed": args.seed,
           "greedy_tokens": GREEDY, "models": {}}
    for name in CONFIGS:
        fname = name + ".config.json"
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([args.bin, "generate", "--config", os.path.join(args.data, fname), "--seed", str(args.seed),
                            "--save", tmp], check=True, stdout=subprocess.DEVNULL)
            cfg = json.load(open(os.path.join(tmp, "config.json")))
            W = load_safetensors(os.path.join(tmp, "model.safetensors"))
        window = cfg.get("sliding_window") or 0 if cfg["model_type"] == "mistral" else 0
        prompts = []
        for base in PROMPTS:
            ids = [i % cfg["vocab_size"] for i in base]
            logits = forward(cfg, W, ids, window)
            tokens, margins = greedy(cfg, W, ids, window)
            entry = {"ids": ids, "logits": [[float("%.7g" % v) for v in row] for row in logits],
                     "greedy": tokens, "margins": [float("%.4g" % m) for m in margins]}
            if window:
                entry["window"] = window
                full, full_margins = greedy(cfg, W, ids, 0)
                entry["greedy_full_attention"] = full
                entry["margins_full_attention"] = [float("%.4g" % m) for m in full_margins]
            prompts.append(entry)
            print(f"{name}: prompt of {len(ids)}: greedy {tokens[:8]}... {len(set(tokens))} distinct, "
                  f"min margin {min(margins):.2e}" + (f", full attention differs: {entry['greedy_full_attention'] != tokens}"
                                                      if window else ""), file=sys.stderr)
        out["models"][name] = {"config": fname, "prompts": prompts}
    path = args.out or os.path.join(args.data, "arch_goldens.json")
    write_goldens(path, out)


if __name__ == "__main__":
    main()
