#!/usr/bin/python3
"""PyTorch eager peer of tessera-bench-decoders: the same seeded weights (an HF folder that
`tessera-models generate --model PRESET --save DIR` writes), float32, a preallocated KV cache per
layer, B sequences prefilled one at a time (all at once would need B x heads x P x P scores) and
then decoded together one token per step (greedy), same threads as tessera.

  OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/peers/torch_decoder.py --dir /tmp/gpt2 \
      --threads 2 --prompts 128,768 --decode 128 --batches 1,8,32,64

Prints the table of tessera-bench-decoders (wall time; process CPU time) and RESULT lines.
Debian's python3-torch (with libopenblas0-pthread); no other package.
"""
import argparse, json, math, os, struct, sys, time

import torch
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {t['dtype']}, this peer reads F32")
        b, e = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[8 + n + b:8 + n + e]), dtype=torch.float32).reshape(t["shape"])
    return out


class Decoder:
    """GPT-2 or LLaMA with a KV cache [layers][B, kv_heads, max_len, head_dim]."""

    def __init__(self, folder):
        cfg = json.load(open(os.path.join(folder, "config.json")))
        W = read_safetensors(os.path.join(folder, "model.safetensors"))
        self.gpt2 = cfg["model_type"] == "gpt2"
        if self.gpt2:
            self.h, self.H, self.L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
            self.KV, self.d, self.eps = self.H, self.h // self.H, cfg["layer_norm_epsilon"]
            w = lambda n: W["transformer." + n]
            self.wte, self.wpe = w("wte.weight"), w("wpe.weight")
            self.layers = []
            for l in range(self.L):
                p = f"h.{l}."
                # Conv1D stores [in, out]: F.linear wants [out, in].
                self.layers.append(dict(
                    n1=(w(p + "ln_1.weight"), w(p + "ln_1.bias")), n2=(w(p + "ln_2.weight"), w(p + "ln_2.bias")),
                    qkv=(w(p + "attn.c_attn.weight").t().contiguous(), w(p + "attn.c_attn.bias")),
                    o=(w(p + "attn.c_proj.weight").t().contiguous(), w(p + "attn.c_proj.bias")),
                    up=(w(p + "mlp.c_fc.weight").t().contiguous(), w(p + "mlp.c_fc.bias")),
                    down=(w(p + "mlp.c_proj.weight").t().contiguous(), w(p + "mlp.c_proj.bias"))))
            self.nf = (w("ln_f.weight"), w("ln_f.bias"))
            self.head = W.get("lm_head.weight", self.wte) if not cfg.get("tie_word_embeddings", True) else self.wte
        else:
            self.h, self.H, self.L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
            self.KV = cfg.get("num_key_value_heads") or self.H
            self.d = cfg.get("head_dim") or self.h // self.H
            self.eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
            rs = cfg.get("rope_scaling") or {}
            factor = rs["factor"] if rs.get("type", rs.get("rope_type")) == "linear" else 1.0
            pos = torch.arange(cfg["max_position_embeddings"], dtype=torch.float64) / factor
            ang = torch.outer(pos, 1.0 / theta ** (torch.arange(0, self.d, 2, dtype=torch.float64) / self.d))
            self.cos = torch.cat([ang.cos(), ang.cos()], -1).float()
            self.sin = torch.cat([ang.sin(), ang.sin()], -1).float()
            self.wte = W["model.embed_tokens.weight"]
            self.layers = []
            for l in range(self.L):
                p = f"model.layers.{l}."
                a = lambda n: W[p + n]
                self.layers.append(dict(
                    n1=a("input_layernorm.weight"), n2=a("post_attention_layernorm.weight"),
                    qkv=torch.cat([a("self_attn.q_proj.weight"), a("self_attn.k_proj.weight"),
                                   a("self_attn.v_proj.weight")]).contiguous(),
                    o=a("self_attn.o_proj.weight"),
                    gate_up=torch.cat([a("mlp.gate_proj.weight"), a("mlp.up_proj.weight")]).contiguous(),
                    down=a("mlp.down_proj.weight")))
            self.nf = W["model.norm.weight"]
            self.head = self.wte if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
        self.vocab = self.wte.shape[0]

    def norm(self, x, p):
        if self.gpt2:
            return F.layer_norm(x, (self.h,), p[0], p[1], self.eps)
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * p

    def rope(self, x, pos):  # x [B, heads, T, d]
        cos, sin = self.cos[pos], self.sin[pos]
        x1, x2 = x[..., : self.d // 2], x[..., self.d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def new_cache(self, B, max_len):
        z = lambda: torch.zeros(B, self.KV, max_len, self.d)
        return [(z(), z()) for _ in range(self.L)]

    def forward(self, ids, start, cache, rows):
        """ids [B, T] at positions start..start+T-1 of the cache rows `rows` (a slice: views, no copies); logits of the last."""
        B, T = ids.shape
        pos = torch.arange(start, start + T)
        x = self.wte[ids] + (self.wpe[pos] if self.gpt2 else 0)
        qw, kvw, g = self.H * self.d, self.KV * self.d, self.H // self.KV
        for l, lw in enumerate(self.layers):
            a = self.norm(x, lw["n1"])
            qkv = F.linear(a, *lw["qkv"]) if self.gpt2 else F.linear(a, lw["qkv"])
            q = qkv[..., :qw].view(B, T, self.H, self.d).transpose(1, 2)
            k = qkv[..., qw:qw + kvw].view(B, T, self.KV, self.d).transpose(1, 2)
            v = qkv[..., qw + kvw:].view(B, T, self.KV, self.d).transpose(1, 2)
            if not self.gpt2:
                q, k = self.rope(q, pos), self.rope(k, pos)
            kc, vc = cache[l]
            kc[rows, :, start:start + T] = k
            vc[rows, :, start:start + T] = v
            K, V = kc[rows, :, :start + T], vc[rows, :, :start + T]  # [B, KV, S, d]
            qg = q.reshape(B, self.KV, g * T, self.d)
            s = (qg @ K.transpose(-1, -2)) / math.sqrt(self.d)  # [B, KV, g*T, S]
            if T > 1:
                mask = torch.ones(T, start + T, dtype=torch.bool).triu(start + 1)
                s = s.view(B, self.KV, g, T, start + T).masked_fill(mask, float("-inf")).view_as(s)
            ctx = (torch.softmax(s, -1) @ V).view(B, self.H, T, self.d).transpose(1, 2).reshape(B, T, qw)
            x = x + (F.linear(ctx, *lw["o"]) if self.gpt2 else F.linear(ctx, lw["o"]))
            m = self.norm(x, lw["n2"])
            if self.gpt2:
                u = F.linear(m, *lw["up"])
                x = x + F.linear(F.gelu(u, approximate="tanh") if "approximate" in F.gelu.__doc__ else
                                 0.5 * u * (1 + torch.tanh(0.7978845608028654 * (u + 0.044715 * u ** 3))), *lw["down"])
            else:
                gu = F.linear(m, lw["gate_up"])
                gate, up = gu.chunk(2, -1)
                x = x + F.linear(F.silu(gate) * up, lw["down"])
        return F.linear(self.norm(x[:, -1], self.nf), self.head)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="HF folder (tessera-models generate --save)")
    ap.add_argument("--name", help="model name in the table (default: the folder's name)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", default="128,768")
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--batches", default="1,8,32,64")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    name = args.name or os.path.basename(os.path.normpath(args.dir))
    m = Decoder(args.dir)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        m.forward(torch.randint(0, m.vocab, (1, 8), generator=gen), 0, m.new_cache(1, 16), slice(0, 1))  # warm-up
        print("%-12s %-9s %6s %6s %8s %10s %10s %12s %12s" % ("model", "phase", "prompt", "seqs", "tokens", "wall s",
                                                             "cpu s", "tok/s wall", "tok/s cpu"))
        for P in map(int, args.prompts.split(",")):
            for B in map(int, args.batches.split(",")):
                cache = m.new_cache(B, P + args.decode)
                ids = torch.randint(0, m.vocab, (B, P), generator=gen)
                t0, c0 = time.perf_counter(), time.process_time()
                last = torch.cat([m.forward(ids[b:b + 1], 0, cache, slice(b, b + 1)) for b in range(B)])
                pre = (time.perf_counter() - t0, time.process_time() - c0, B * P)
                rows = slice(0, B)
                t0, c0 = time.perf_counter(), time.process_time()
                for n in range(args.decode):
                    last = m.forward(last.argmax(-1, keepdim=True), P + n, cache, rows)
                dec = (time.perf_counter() - t0, time.process_time() - c0, B * args.decode)
                for phase, (wall, cpu, tok) in (("prefill", pre), ("decode", dec)):
                    print("%-12s %-9s %6d %6d %8d %10.3f %10.3f %12.1f %12.1f" % (
                        name, phase, P, B, tok, wall, cpu, tok / wall, tok / (cpu / args.threads)), flush=True)
                    print(f"RESULT bench=decoders engine=pytorch model={name} phase={phase} seqs={B} prompt={P} "
                          f"threads={args.threads} tokens={tok} wall_s={wall:.4f} tok_per_s_wall={tok / wall:.2f} "
                          f"tok_per_s_cpu={tok / (cpu / args.threads):.2f}",
                          flush=True)
                del cache


if __name__ == "__main__":
    main()
