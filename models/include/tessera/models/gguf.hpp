// tessera/models/gguf.hpp: a decoder written as a GGUF file (version 3, f32 tensors) that llama.cpp
// loads, so an engine that shares no code with tessera can run the same weights.
//
// Metadata is llama.cpp's: general.architecture "llama" or "gpt2" and <arch>.context_length,
// embedding_length, block_count, feed_forward_length, attention.head_count (and head_count_kv,
// key_length/value_length, layer_norm_rms_epsilon, rope.dimension_count, rope.freq_base,
// rope.scaling.type/factor for LLaMA; attention.layer_norm_epsilon for GPT-2), and the tokenizer
// (tokenizer.ggml.model "llama" with scores, or "gpt2" with merges; tokens, token types, bos/eos).
// Tensors are named as llama.cpp names them (token_embd, blk.N.attn_q, ..., output). Two layout
// changes from Hugging Face's checkpoints:
//  - LLaMA: the rows of Q and K of every head are reordered from HF's rotate_half pairing (i, i + d/2)
//    to the adjacent pairing (2i, 2i + 1) llama.cpp rotates: GGUF row h*d + 2i + s = HF row
//    h*d + s*d/2 + i (s = 0, 1);
//  - GPT-2: Q, K and V are one fused attn_qkv [3*hidden, hidden] in [out, in] order (HF's Conv1D
//    stores [in, out]).
//
//   auto m = load_decoder("llama-tiny");
//   auto tok = bpe_tokenizer::load("llama");
//   write_gguf(*m, *tok, "/tmp/llama-tiny.gguf");
#pragma once

#include <string>

#include "tessera/common/status.hpp"
#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/models/decoder.hpp"

namespace tessera::models {

/// How write_gguf stores the weights and what it adds to the tokenizer's metadata.
struct gguf_write_options {
  /// false: every tensor F32 (file_type 0). true: the matrices (2-D tensors: embeddings, attention,
  /// MLP, LM head) F16, rounded to nearest even, vectors (norms, biases) F32, as llama.cpp's own
  /// converter writes "--outtype f16" (file_type 1, MOSTLY_F16).
  bool f16 = false;
  /// true: the matrices whose rows (ne[0]) are whole blocks of 32 values Q8_0 (quantize_q8_0:
  /// d = max |x| / 127 as fp16, q = round(x / d), as ggml's reference quantiser rounds), the other
  /// matrices and the vectors F32 (file_type 7, MOSTLY_Q8_0). Not with f16.
  bool q8_0 = false;
  /// tokenizer.chat_template (a Jinja template); empty: the tokenizer's chat_template(), none when
  /// that is empty too.
  std::string chat_template;
};

/// Writes `model` and `tokenizer` as a GGUF v3 file at `path` (f32, or f16 or Q8_0 matrices:
/// `options`; the model must hold fp32 matrices). The tokenizer must have at
/// least the model's vocab_size tokens; a larger one is cut to the model's first vocab_size ids
/// (with only the merges among them). The kind must fit the architecture (byte-level BPE for gpt2,
/// SentencePiece-style for llama). bos/eos are the model's (the tokenizer's when the model has none).
/// Errors name what does not fit; a partly written file is removed.
status write_gguf(const decoder_model& model, const bpe_tokenizer& tokenizer, const std::string& path,
                  const gguf_write_options& options = {});

}  // namespace tessera::models
