// tessera/timing/llm_step.hpp: modelled time of one LLM serving step (a mixed continuous-batching
// step: prefill chunks and decodes together) on a GPU or on an IPU system.
//
// A step runs every layer once over its T new tokens. Per layer, two kernels classes, each timed as
// the larger of its compute and its memory time (GEMMs and attention are separate kernels in every
// serving stack, so a step whose GEMMs are compute-bound can still have KV-bound attention):
//
//   GEMMs (Q, K, V, O, FFN):  compute = 2 T P_layer / F           memory = P_layer e / B_weights
//   attention:                compute = 4 H d sum(keys attended) / F
//                             memory  = (K,V bytes per token per layer) (sum(keys read) + T) / B_kv
//   + per-layer overhead (GPU: launches x launch_overhead_s; IPU: supersteps x (sync + compute-set
//     overhead cycles) / clock)
// then the LM head for every sequence that wants logits, and, for a multi-chip IPU, the activations
// passed between chips (hops x (T h e / link bandwidth + hop latency)). F is the device's dense fp16
// peak times the preset's fitted efficiency (GPU: tensor_core_efficiency, IPU: amp_efficiency);
// B_weights and B_kv are where the weights and the KV cache live: HBM x hbm_efficiency on a GPU,
// tile SRAM on an IPU whose chips hold the weights, or the IPU's Streaming Memory (external DRAM)
// when they do not fit (llm_system.hpp builds the systems and states every figure's source).
// Activations other than the KV cache are not counted as memory traffic (they stay in L2 / SRAM).
//
// Usage:
//   auto dims = tessera::timing::decoder_dims_of(*tessera::models::shape_preset("llama-2-7b"));
//   auto sys = tessera::timing::make_llm_system("a100-40gb", *dims);
//   tessera::timing::llm_step_batch b;
//   b.decode_contexts = {512, 300, 17};        // three decodes
//   b.prefills.push_back({256, 0, true});      // a 256-token prompt chunk
//   auto t = tessera::timing::model_llm_step(*sys, *dims, b);   // t->seconds, t->memory_bound()
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/shape.hpp"

namespace tessera::timing {

/// The sizes of a decoder the step model needs, read from a models::model_shape.
struct decoder_dims {
  std::string name;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  bool gated = false;          ///< SwiGLU FFN: gate, up and down matrices (else up and down)
  bool tied_embeddings = false;  ///< the LM head is the embedding table (stored once)
  int64_t window = 0;          ///< sliding-window attention: a query attends at most this many keys (0 = all)
  double element_bytes = 2;    ///< fp16 / bf16 weights and KV cache
  double activation_bytes = 2; ///< activations between chips (all-reduces, pipeline sends): fp16 even with fp8 weights

  /// Q, K, V, O and FFN weights of one layer (norm gains and biases are negligible and not counted).
  int64_t layer_linear_params() const;
  /// The LM head (vocab x hidden).
  int64_t lm_head_params() const { return vocab * hidden; }
  /// Weights read once per step: every layer's linear weights and the LM head (the embedding is a
  /// gather of T rows, not a stream of the table).
  double weight_bytes() const;
  /// Weights resident in memory: weight_bytes() and the embedding table unless it is the LM head.
  double resident_bytes() const { return weight_bytes() + (tied_embeddings ? 0.0 : double(vocab * hidden) * element_bytes); }
  /// K and V of one token in one layer.
  double kv_bytes_per_token_per_layer() const { return 2.0 * double(kv_heads * head_dim) * element_bytes; }
  /// K and V of one token over all layers.
  double kv_bytes_per_token() const { return double(layers) * kv_bytes_per_token_per_layer(); }
};

/// A decoder shape by name or file: a models::shape_preset name (llama-2-7b, llama-2-70b, ...), else a
/// Hugging Face config.json or a folder holding one (models::load_decoder_config: hidden size, layers,
/// heads, KV heads, intermediate size, vocab, tied embeddings, the architecture's traits). An unknown
/// name that is no readable file is refused naming both ways.
result<models::model_shape> resolve_decoder_shape(const std::string& preset_or_path);

/// Dims of a decoder shape (gpt2, llama; an encoder is unsupported); gated and tied as the shape says.
result<decoder_dims> decoder_dims_of(const models::model_shape& s);

/// One prompt chunk in a step: `tokens` new prompt tokens at positions context .. context+tokens-1
/// (the K/V of the first `context` positions are already cached). `logits`: this chunk ends the
/// prompt, so the step produces the sequence's first output token.
struct prefill_chunk {
  int64_t tokens = 0;
  int64_t context = 0;
  bool logits = true;
};

/// A mixed step: prompt chunks and decode sequences (each decodes one token with `context` cached).
struct llm_step_batch {
  std::vector<prefill_chunk> prefills;
  std::vector<int64_t> decode_contexts;

  int64_t tokens() const;         ///< new tokens in the step
  int64_t logit_rows() const;     ///< sequences whose LM head runs (decodes + final prompt chunks)
  status validate() const;        ///< no negative sizes, at least one token
};

struct llm_system;  // llm_system.hpp

/// The modelled time of one step and where it goes.
struct llm_step_time {
  double seconds = 0;
  double gemm_compute_s = 0, gemm_memory_s = 0;  ///< summed over layers (before taking maxima)
  double attn_compute_s = 0, attn_memory_s = 0;
  double lm_head_s = 0;
  double overhead_s = 0;     ///< launches / supersteps
  double link_s = 0;         ///< chip-to-chip activation hops (multi-chip IPU)
  double flops = 0;          ///< FLOPs of the step
  double bytes = 0;          ///< weight + KV bytes read and KV bytes written
  double compute_s() const { return gemm_compute_s + attn_compute_s; }
  double memory_s() const { return gemm_memory_s + attn_memory_s; }
  /// More time would go to memory than to arithmetic if nothing overlapped.
  bool memory_bound() const { return memory_s() > compute_s(); }
};

/// Time of one step of `b` on one replica of `sys` (see the header comment for the equations).
result<llm_step_time> model_llm_step(const llm_system& sys, const decoder_dims& d, const llm_step_batch& b);

}  // namespace tessera::timing
