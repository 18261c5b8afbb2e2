#!/usr/bin/python3
"""Generated tokenizer.json files for the RoBERTa / XLM-R test models and their goldens.

usage: /usr/bin/python3 scripts/make_encoder_tokenizers.py [--out tests/data/models]
(run make_roberta_goldens.py first for the "http" goldens: they need the models' weights)

Writes
  tiny-xlmr-embed/tokenizer.json, tiny-xlmr-rerank/tokenizer.json: XLM-R's layout, a SentencePiece
      Unigram over 260 ids (<s> <pad> </s> <unk>, pieces with seeded log-probabilities, <mask> last),
      normalizer Replace " {2,}" -> " ", Metaspace (always prepend, split), TemplateProcessing
      <s> $A </s>; <mask> with lstrip
  tiny-roberta-cls/tokenizer.json: RoBERTa's layout, a byte-level BPE over 320 ids (<s> <pad> </s>
      <unk>, the 256 byte characters, seeded merges, <mask> last), ByteLevel pre-tokenizer and
      decoder, RobertaProcessing
and encoder_tokenizer_goldens.json: for each text, the Unigram pieces (ids and byte offsets) and
the BPE ids, both without specials; and "http": texts through the tokenizers and the models
(make_roberta_goldens.py's float64 forward over the written safetensors): tiny-roberta-cls's
raw logits of <s> text </s>, tiny-xlmr-embed's normalized mean embeddings, tiny-xlmr-rerank's
raw scores of <s> query </s></s> text </s> (what TEI's /predict, /embed and /rerank answer).

The segmentations here are written from the algorithms' definitions, independent of tessera's C++:
Unigram is a Viterbi over characters (highest summed score; a character no single-character piece
covers is unknown with score min - 10; consecutive unknowns fused; on a tie the earliest-starting
last piece stays, as HF's encode_optimized); BPE applies the lowest-ranked merge leftmost first
within GPT-2's pre-tokenizer words (its regex written out as a scanner).
"""
import argparse, json, os

import struct, sys

import numpy as np


SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
META = "\u2581"
WORDS = ["hello", "world", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tessera", "tiles",
         "token", "unigram", "viterbi", "naïve", "café", "日本", "encoder", "sentence", "piece", "model",
         "embedding", "rerank", "query", "passage", "roberta"]
# Characters left out of the Unigram vocab: they come out unknown (fused when adjacent).
MISSING = set("zqx語")
TEXTS = ["Hello world", "the quick brown fox jumps over the lazy dog", "  leading and   multiple spaces ",
         "naïve café 日本語", "zzz unknown xq words", "<s> special </s> in text", "a <mask> here", "",
         "tessera tiles tokenize with viterbi: unigram!", "query: roberta embedding model",
         "passage: sentence piece encoder", "I'm 6. Don't you've it's", "tab\tand\nnewline", "🙂 ok"]


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1); f.write("\n")


# ---- Unigram ---------------------------------------------------------------------------------------

def make_unigram(rng, size):
    pieces = {}
    chars = sorted({c for w in WORDS for c in w} | set("abcdefghijklmnopqrstuvwxyz:!.'") - MISSING)
    for c in chars: pieces[c] = -rng.uniform(6, 12)
    pieces[META] = -rng.uniform(3, 5)
    pieces[META + "I"] = -rng.uniform(6, 9)
    cands = set()
    for w in WORDS:
        mw = META + w
        for i in range(len(mw)):
            for j in range(i + 2, min(len(mw), i + 7) + 1):
                if not set(mw[i:j]) & MISSING: cands.add(mw[i:j])
    cands = sorted(cands)
    rng.shuffle(cands)
    for p in cands:
        if len(pieces) >= size - len(SPECIALS) - 1: break
        pieces[p] = -rng.uniform(2, 14) + 0.8 * len(p)
    vocab = [[s, 0.0] for s in SPECIALS] + [[p, float(round(s, 6))] for p, s in pieces.items()] + [["<mask>", 0.0]]
    assert len(vocab) <= size, len(vocab)
    return vocab


def unigram_json(vocab):
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, s in enumerate(SPECIALS)]
    added.append({"id": len(vocab) - 1, "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False,
                  "normalized": False, "special": True})
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
            "pre_tokenizer": {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": True},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                          {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                               "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                        {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                                        {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                               "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                                                  "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
            "decoder": {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": True},
            "model": {"type": "Unigram", "unk_id": 3, "vocab": vocab, "byte_fallback": False}}


def split_added(text, added):
    """[(segment_text, start, is_added, id)], earliest match first, longest at a position; lstrip."""
    out, at = [], 0
    while True:
        hits = [(text.find(c, at), -len(c), c, i, l) for c, i, l in added if text.find(c, at) >= 0]
        if not hits:
            if at < len(text): out.append((text[at:], at, False, None))
            return out
        p, _, c, i, lstrip = min(hits)
        end = p
        if lstrip:
            while end > at and text[end - 1] in " \t\n\r": end -= 1
        if end > at: out.append((text[at:end], at, False, None))
        out.append((c, p, True, i))
        at = p + len(c)


def unigram_encode(vocab, text):
    """[(id, start, stop)] with byte offsets into text."""
    ids = {}
    for i, (p, _) in enumerate(vocab):
        ids.setdefault(p, i)
    score = {i: s for i, (_, s) in enumerate(vocab)}
    unk_score = min(s for _, s in vocab) - 10
    maxlen = max(len(p) for p, _ in vocab)
    added = [(s, i, False) for i, s in enumerate(SPECIALS)] + [("<mask>", len(vocab) - 1, True)]
    bo = lambda ci: len(text[:ci].encode())  # char index -> byte offset
    out = []
    for seg, start, is_added, tid in split_added(text, added):
        if is_added:
            out.append((tid, bo(start), bo(start + len(seg)))); continue
        # characters with their original char spans; collapse runs of >= 2 spaces to one
        cs, i = [], 0
        while i < len(seg):
            j = i
            while j < len(seg) and seg[j] == " ": j += 1
            if j - i >= 2:
                cs.append((" ", start + i, start + j)); i = j
            else:
                cs.append((seg[i], start + i, start + i + 1)); i += 1
        cs = [(META if c == " " else c, a, b) for c, a, b in cs]
        if cs and cs[0][0] != META: cs.insert(0, (META, cs[0][1], cs[0][1]))
        words = []
        for c in cs:
            if not words or c[0] == META: words.append([])
            words[-1].append(c)
        for w in words:
            n = len(w)
            best = [None] * (n + 1)  # (score, id, from)
            best[0] = (0.0, None, None)
            for s in range(n):
                if best[s] is None: continue
                single = False
                for e in range(s + 1, min(n, s + maxlen) + 1):
                    p = "".join(c[0] for c in w[s:e])
                    if p not in ids: continue
                    if e == s + 1: single = True
                    cand = best[s][0] + score[ids[p]]
                    if best[e] is None or cand > best[e][0]: best[e] = (cand, ids[p], s)
                if not single:
                    cand = best[s][0] + unk_score
                    if best[s + 1] is None or cand > best[s + 1][0]: best[s + 1] = (cand, 3, s)
            segs, e = [], n
            while e > 0:
                _, tid, s = best[e]
                real = [c for c in w[s:e] if c[2] > c[1]]
                a = real[0][1] if real else w[s][1]
                b = max(c[2] for c in real) if real else w[s][1]
                if tid == 3 and segs and segs[-1][0] == 3:
                    segs[-1] = (3, a, segs[-1][2])
                else:
                    segs.append((tid, a, b))
                e = s
            out += [(t, bo(a), bo(b)) for t, a, b in reversed(segs)]
    return out


# ---- byte-level BPE --------------------------------------------------------------------------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return dict(zip(bs, map(chr, cs)))


def gpt2_words(text):
    """GPT-2's pre-tokenizer regex as a scanner ('s 't 're 've 'm 'll 'd, ' ?L+', ' ?N+', ' ?other+',
    whitespace runs: all but the last space when a non-space follows)."""
    L = lambda c: c.isalpha()
    N = lambda c: c.isnumeric()
    S = lambda c: c.isspace()
    out, i, n = [], 0, len(text)
    while i < n:
        for suf in ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d"):
            if text.startswith(suf, i):
                out.append(suf); i += len(suf); break
        else:
            j = i + 1 if text[i] == " " and i + 1 < n and not S(text[i + 1]) else i
            for cls in (L, N, lambda c: not S(c) and not L(c) and not N(c)):
                if j < n and cls(text[j]):
                    k = j
                    while k < n and cls(text[k]): k += 1
                    out.append(text[i:k]); i = k; break
            else:
                k = i
                while k < n and S(text[k]): k += 1
                if k < n and k - i > 1: k -= 1  # \s+(?!\S)
                out.append(text[i:k]); i = k
    return out


def make_bpe(rng, size):
    b2u = bytes_to_unicode()
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(256): vocab[b2u[b]] = len(vocab)
    corpus = [" ".join(WORDS), " ".join(WORDS[::-1]), "the quick brown fox jumps over the lazy dog"]
    words = {}
    for t in corpus:
        for w in gpt2_words(t):
            k = tuple(b2u[b] for b in w.encode())
            words[k] = words.get(k, 0) + 1 + int(rng.integers(0, 3))
    merges = []
    while len(vocab) < size - 1:
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]): pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs: break
        a, b = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(f"{a} {b}")
        vocab[a + b] = len(vocab)
        nw = {}
        for w, c in words.items():
            o, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b: o.append(a + b); i += 2
                else: o.append(w[i]); i += 1
            nw[tuple(o)] = c
        words = nw
    vocab["<mask>"] = len(vocab)
    return vocab, merges


def bpe_json(vocab, merges):
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, s in enumerate(SPECIALS)]
    added.append({"id": vocab["<mask>"], "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False,
                  "normalized": False, "special": True})
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True,
                               "add_prefix_space": False},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": merges}}


def bpe_encode(vocab, merges, text):
    b2u = bytes_to_unicode()
    rank = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
    added = [(s, i, False) for i, s in enumerate(SPECIALS)] + [("<mask>", vocab["<mask>"], True)]
    out = []
    for seg, _, is_added, tid in split_added(text, added):
        if is_added:
            out.append(tid); continue
        for w in gpt2_words(seg):
            parts = [b2u[b] for b in w.encode()]
            while len(parts) > 1:
                r, i = min((rank.get((parts[i], parts[i + 1]), 1 << 30), i) for i in range(len(parts) - 1))
                if r == 1 << 30: break
                parts[i:i + 2] = [parts[i] + parts[i + 1]]
            out += [vocab[p] for p in parts]
    return out


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], "<f4").reshape(v["shape"]).astype(np.float64)
            for k, v in header.items() if k != "__metadata__"}


HTTP_CLASSIFY = ["the quick brown fox jumps over the lazy dog", "hello world", "a <mask> here", "I'm 6."]
HTTP_EMBED = ["query: roberta embedding model", "passage: sentence piece encoder", "naïve café 日本語", "zzz  unknown"]
HTTP_QUERY = "what is a tile"
HTTP_TEXTS = ["tessera tiles", "the lazy dog", "unigram viterbi model"]


def http_goldens(out, uvocab, bvocab, merges):
    """None until make_roberta_goldens.py has written the three model folders' weights."""
    if not all(os.path.exists(os.path.join(out, d, "model.safetensors"))
               for d in ("tiny-roberta-cls", "tiny-xlmr-embed", "tiny-xlmr-rerank")):
        return None
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_roberta_goldens as rg
    pc = read_safetensors(os.path.join(out, "tiny-roberta-cls", "model.safetensors"))
    pe = read_safetensors(os.path.join(out, "tiny-xlmr-embed", "model.safetensors"))
    pr = read_safetensors(os.path.join(out, "tiny-xlmr-rerank", "model.safetensors"))
    uni = lambda t: [i for i, _, _ in unigram_encode(uvocab, t)]
    g = {"classify": [], "embed": [], "rerank": {"query": HTTP_QUERY, "texts": HTTP_TEXTS, "scores": []}}
    for t in HTTP_CLASSIFY:
        ids = [0] + bpe_encode(bvocab, merges, t) + [2]
        g["classify"].append({"text": t, "ids": ids, "logits": rg.rounded(rg.head(pc, rg.encoder(pc, "roberta.", np.array(ids))))})
    for t in HTTP_EMBED:
        ids = [0] + uni(t) + [2]
        v = rg.encoder(pe, "", np.array(ids)).mean(0)
        g["embed"].append({"text": t, "ids": ids, "normalized": rg.rounded(v / np.linalg.norm(v))})
    for t in HTTP_TEXTS:
        ids = [0] + uni(HTTP_QUERY) + [2, 2] + uni(t) + [2]
        g["rerank"]["scores"].append(float(f"{rg.head(pr, rg.encoder(pr, 'roberta.', np.array(ids)))[0]:.9g}"))
    return g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models"))
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    rng = np.random.default_rng(2813)
    uvocab = make_unigram(rng, 260)
    for d in ("tiny-xlmr-embed", "tiny-xlmr-rerank"):
        write_json(os.path.join(out, d, "tokenizer.json"), unigram_json(uvocab))
    bvocab, merges = make_bpe(rng, 320)
    write_json(os.path.join(out, "tiny-roberta-cls", "tokenizer.json"), bpe_json(bvocab, merges))
    cases = []
    for t in TEXTS:
        u = unigram_encode(uvocab, t)
        cases.append({"text": t, "unigram_ids": [i for i, _, _ in u], "unigram_offsets": [[a, b] for _, a, b in u],
                      "bpe_ids": bpe_encode(bvocab, merges, t)})
    write_json(os.path.join(out, "encoder_tokenizer_goldens.json"),
               {"unigram": "tiny-xlmr-embed/tokenizer.json", "bpe": "tiny-roberta-cls/tokenizer.json", "cases": cases,
                "tolerance": 1e-4, "http": http_goldens(out, uvocab, bvocab, merges)})


if __name__ == "__main__":
    main()
