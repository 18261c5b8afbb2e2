#!/usr/bin/python3
"""Golden data for tessera's models tests (tests/data/models/), made with Debian's python3-torch.

usage: /usr/bin/python3 scripts/make_model_goldens.py [--out tests/data/models] [--no-tokenizer]

Writes a small Hugging Face BERT folder with unusual shapes, tests/data/models/tiny-odd/:
  config.json          hidden 96 = 6 heads x 16, intermediate 200, 3 layers, 3 labels, 64 positions
  model.safetensors    written by hand in the safetensors format ("bert." prefixed names, as HF)
  vocab.txt            specials, characters (ASCII, Latin-1, Greek, Cyrillic, CJK, kana), ## pieces, words
  tokenizer_config.json
and tests/data/models/tiny_odd_logits.json: batches of token/type ids and the logits of the same
model computed here in plain torch with exactly Hugging Face BertForSequenceClassification's math
(post-LN, erf GELU, additive -finfo.min attention mask, tanh pooler on [CLS]), fp32, padded + masked.

Then, unless --no-tokenizer, it runs models/scripts/tokenizer_goldens.mjs (node + the npm package
@huggingface/transformers, Hugging Face's own JS BertTokenizer) over tests/data/models/tokenizer_cases.json
to write tests/data/models/tokenizer_goldens.json. CI needs neither torch nor node: outputs are committed.
"""
import argparse, json, math, os, struct, subprocess, sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from goldens_io import write_safetensors, write_goldens  # noqa: E402
from encoder_f64 import encoder_params  # noqa: E402

CFG = dict(hidden_size=96, num_hidden_layers=3, num_attention_heads=6, intermediate_size=200,
           max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu",
           id2label={"0": "negative", "1": "neutral", "2": "positive"})

WORDS = """the of and to in a is that for it as was with be by on not he i this are or his from at which
but have an they you were her she there been one all we their has would when if so no will more out up
into do any your what some can about them him than then only its also two time could new first after
like may other over such people very how most our these just used made through between many well
before must back where those much year years day make world good way because each while part same
under house word un aff able ##able ##ing ##ed ##s ##es ##ly ##er ##est ##tion ##ness ##ment ##al ##ful
##less ##ize ##ise ##ion play run jump walk talk ##ed ##ing cafe naive resume hello world token
##izer bert model tile tiles emulator inference ##ity ##ous""".split()


def make_vocab():
    toks = ["[PAD]"] + [f"[unused{i}]" for i in range(10)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(33, 127)]
    chars += [chr(c) for c in range(0xA1, 0x100) if chr(c).isprintable()]
    chars += [chr(c) for c in range(0x3B1, 0x3CA)] + [chr(c) for c in range(0x430, 0x450)]
    chars += [chr(c) for c in range(0x4E00, 0x4E00 + 160)] + [chr(c) for c in range(0x3041, 0x3097)]
    chars += ["中", "国", "日", "本", "語", "你", "好", "世", "界", "€", "—", "…", "“", "”", "’"]
    seen = set(toks)
    for c in chars:
        if c not in seen:
            toks.append(c); seen.add(c)
    for c in list(chars):
        if c.isalnum() and "##" + c not in seen:
            toks.append("##" + c); seen.add("##" + c)
    for w in WORDS:
        if w not in seen:
            toks.append(w); seen.add(w)
    return toks


def init_params(vocab_size, gen):
    h, nl = CFG["hidden_size"], len(CFG["id2label"])
    def n(*shape, std=0.1):
        return (torch.randn(*shape, generator=gen) * std).float()
    p = encoder_params(n, "bert.", vocab_size, CFG, attn_std=0.15)
    p["bert.pooler.dense.weight"] = n(h, h, std=0.15); p["bert.pooler.dense.bias"] = n(h, std=0.05)
    p["classifier.weight"] = n(nl, h, std=0.5); p["classifier.bias"] = n(nl, std=0.1)
    return p


def hf_bert_logits(p, ids, types, mask):
    """BertForSequenceClassification.forward in eval mode, written out (ids/types/mask [B, L])."""
    h, nh = CFG["hidden_size"], CFG["num_attention_heads"]
    d, eps = h // nh, CFG["layer_norm_eps"]
    F = torch.nn.functional
    B, L = ids.shape
    lin = lambda x, name: F.linear(x, p[name + ".weight"], p[name + ".bias"])
    ln = lambda x, name: F.layer_norm(x, (h,), p[name + ".weight"], p[name + ".bias"], eps)
    pos = torch.arange(L).unsqueeze(0).expand(B, L)
    x = (p["bert.embeddings.word_embeddings.weight"][ids] + p["bert.embeddings.token_type_embeddings.weight"][types]
         + p["bert.embeddings.position_embeddings.weight"][pos])
    x = ln(x, "bert.embeddings.LayerNorm")
    ext = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    for l in range(CFG["num_hidden_layers"]):
        pre = f"bert.encoder.layer.{l}."
        split = lambda t: t.view(B, L, nh, d).permute(0, 2, 1, 3)
        q, k, v = (split(lin(x, pre + "attention.self." + n)) for n in ("query", "key", "value"))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + ext
        ctx = torch.matmul(torch.softmax(s, dim=-1), v).permute(0, 2, 1, 3).reshape(B, L, h)
        x = ln(lin(ctx, pre + "attention.output.dense") + x, pre + "attention.output.LayerNorm")
        inter = F.gelu(lin(x, pre + "intermediate.dense"))
        x = ln(lin(inter, pre + "output.dense") + x, pre + "output.LayerNorm")
    pooled = torch.tanh(lin(x[:, 0], "bert.pooler.dense"))
    return lin(pooled, "classifier")


def run_packed(p, seqs):
    """seqs: list of (ids, types); returns logits [n, labels], one padded+masked batch."""
    L = max(len(s[0]) for s in seqs)
    ids = torch.zeros(len(seqs), L, dtype=torch.long); types = torch.zeros_like(ids); mask = torch.zeros_like(ids)
    for i, (a, t) in enumerate(seqs):
        ids[i, :len(a)] = torch.tensor(a); types[i, :len(a)] = torch.tensor(t); mask[i, :len(a)] = 1
    with torch.no_grad():
        return hf_bert_logits(p, ids, types, mask)


def write_torch_safetensors(path, tensors):
    write_safetensors(path, {k: v.contiguous().double().numpy() for k, v in tensors.items()})


def make_batches(vocab_size, gen):
    P = CFG["max_position_embeddings"]
    def seq(L):
        ids = torch.randint(0, vocab_size, (L,), generator=gen).tolist()
        ids[0] = 12  # [CLS]
        cut = L // 2 if L >= 4 else L  # second segment of type 1, as in sentence pairs
        return ids, [0] * cut + [1] * (L - cut)
    mixed = [seq(L) for L in range(1, P + 1)]
    perm = torch.randperm(len(mixed), generator=gen).tolist()
    mixed = [mixed[i] for i in perm]
    short = [seq(L) for L in (1, 2, 3, 7, 5)]
    return {"mixed_1_to_max": mixed, "short": short}


TOKENIZER_CASES = [
    "Hello, world!", "hello world", "  leading and trailing spaces  ", "UNAFFABLE unaffable Unaffable",
    "Café naïve résumé façade coöperate", "Ångström Øresund Straße æsir", "ÀÉÎÕÜ àéîõü ÇÑ",
    "中国日本語 你好世界", "mixed中文and English", "日本語のテキスト、です。",
    "emoji 😀 and 👍🏽 and 🇫🇷 flags", "punctuation!!! ...??? ---- (((nested))) [x]{y}<z>",
    "it's a dog's life; isn't it?", "e-mail: someone@example.com, url https://x.y/z?q=1&r=2",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u2003em space\u3000ideographic",
    "zero\u200bwidth\u200djoiner soft\u00adhyphen", "control\u0001chars\u0007here\u001f",
    "bom\ufeffinside", "replacement \ufffd char", "a" * 101, "b" * 100, "playing" * 20,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "ΣΊΣΥΦΟΣ Σίσυφος ΟΔΥΣΣΕΥΣ", "ПРИВЕТ мир Ёлка", "İstanbul DİYARBAKIR", "ﬁne ﬂow ligatures",
    "numbers 123 4.56 7,890 1/2 ½ ² ①", "math ∑ ∫ √ ≤ ≥ ≠ ∞", "quotes “double” ‘single’ «guillemets» „low“",
    "dashes – — ‐ and ellipsis …", "currency $5 €10 £3 ¥100", "e\u0301 combining acute, n\u0303",
    "한국어 텍스트", "ﾊﾝｶｸ full-width ＡＢＣ１２３", "", "   ", "!", "[unused1] not special here",
    "mIxEd CaSe WoRdS", "typed [SEP] and [MASK] tokens", "a[CLS]b[SEP]c", "[sep] lower [ SEP ]", "hello\u2028line\u2029para", "tile emulator inference tokenizer bert",
]
TOKENIZER_PAIRS = [
    ["How old are you?", "I'm 6 years old."], ["Café", "naïve résumé"], ["", "only second"],
    ["中文", "日本語 text"], ["punct!!!", "???"],
]


def write_tokenizer_cases(out):
    cases = [{"text": t} for t in TOKENIZER_CASES]
    cases += [{"a": a, "b": b} for a, b in TOKENIZER_PAIRS]
    with open(os.path.join(out, "tokenizer_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"vocab": "tiny-odd/vocab.txt", "cases": cases}, f, ensure_ascii=False, indent=1); f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models"))
    ap.add_argument("--no-tokenizer", action="store_true")
    args = ap.parse_args()
    out = os.path.abspath(args.out); folder = os.path.join(out, "tiny-odd")
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    vocab = make_vocab()
    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    cfg = dict(architectures=["BertForSequenceClassification"], model_type="bert", vocab_size=len(vocab), **CFG)
    cfg["label2id"] = {v: int(k) for k, v in CFG["id2label"].items()}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2); f.write("\n")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f, indent=2); f.write("\n")
    p = init_params(len(vocab), gen)
    write_torch_safetensors(os.path.join(folder, "model.safetensors"), p)
    goldens = {"model": "tiny-odd", "tolerance": 1e-4, "batches": []}
    for name, seqs in make_batches(len(vocab), gen).items():
        logits = run_packed(p, seqs)
        offs = [0]
        for a, _ in seqs: offs.append(offs[-1] + len(a))
        goldens["batches"].append({
            "name": name,
            "token_ids": [i for a, _ in seqs for i in a],
            "token_type_ids": [t for _, ts in seqs for t in ts],
            "seq_offsets": offs,
            "logits": [round(float(v), 7) for v in logits.flatten()]})
        print(f"{name}: {len(seqs)} sequences, {offs[-1]} tokens, max |logit| {logits.abs().max():.3f}")
    with open(os.path.join(out, "tiny_odd_logits.json"), "w") as f:
        json.dump(goldens, f); f.write("\n")
    print("wrote", folder, "and tiny_odd_logits.json;", os.path.getsize(os.path.join(folder, "model.safetensors")), "bytes")
    write_tokenizer_cases(out)
    if not args.no_tokenizer:
        js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "scripts", "tokenizer_goldens.mjs")
        subprocess.run(["node", js, out], check=True)


if __name__ == "__main__":
    main()
